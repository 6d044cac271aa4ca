//! What `btprof record` reads from a Mach-O program before it runs it on
//! macOS: its architectures (a universal file has several; dyld kills a
//! process whose inserted library has no slice for the one that runs) and
//! its code signature (the hardened runtime makes dyld ignore
//! `DYLD_INSERT_LIBRARIES` without a word). Plain parsing of the file's
//! bytes, so it is tested on every system with constructed files; the
//! decisions are in `dyld_rules.rs`.

use object::macho::{
    FatArch32, FatArch64, MachHeader64, CPU_SUBTYPE_ARM64E, CPU_TYPE_ARM64, CPU_TYPE_X86_64,
    LC_CODE_SIGNATURE,
};
use object::read::macho::{FatArch, MachHeader, MachOFatFile};
use object::Endianness;

/// The architecture a slice is built for, as far as loading a library
/// into it goes: arm64e processes load only arm64e libraries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    Arm64,
    Arm64e,
    /// Anything else (i386, PowerPC, arm64_32): nothing btprof loads into.
    Other(u32),
}

impl Arch {
    /// From a header's `cputype` and `cpusubtype`.
    pub fn of(cputype: u32, subtype: u32) -> Arch {
        // The subtype's high byte holds capability bits (pointer
        // authentication's ABI version), not the subtype.
        let id = subtype & !object::macho::CPU_SUBTYPE_MASK;
        if cputype == CPU_TYPE_X86_64.0 {
            Arch::X86_64
        } else if cputype == CPU_TYPE_ARM64.0 && id == CPU_SUBTYPE_ARM64E.0 {
            Arch::Arm64e
        } else if cputype == CPU_TYPE_ARM64.0 {
            Arch::Arm64
        } else {
            Arch::Other(cputype)
        }
    }

    /// Its name, as `lipo -archs` says it.
    pub fn name(self) -> String {
        match self {
            Arch::X86_64 => "x86_64".to_owned(),
            Arch::Arm64 => "arm64".to_owned(),
            Arch::Arm64e => "arm64e".to_owned(),
            Arch::Other(cputype) => format!("cputype {cputype:#x}"),
        }
    }
}

/// One architecture's program in a Mach-O file.
#[derive(Clone, Copy, Debug)]
pub struct Slice<'a> {
    pub arch: Arch,
    /// The slice's bytes: the whole file when it is thin.
    pub data: &'a [u8],
}

/// The slices of a Mach-O file (one for a thin file); `Ok(None)` when the
/// file is not Mach-O at all (a script, or something the system refuses
/// to run anyway).
pub fn slices(file: &[u8]) -> Result<Option<Vec<Slice<'_>>>, String> {
    let Some(magic) = file.get(..4) else {
        return Ok(None);
    };
    let be = u32::from_be_bytes([magic[0], magic[1], magic[2], magic[3]]);
    let le = u32::from_le_bytes([magic[0], magic[1], magic[2], magic[3]]);
    if be == object::macho::FAT_MAGIC {
        // Java class files share the magic; their "count" is a version
        // number, 45 or more, where a universal file has a handful.
        if file
            .get(4..8)
            .is_some_and(|n| u32::from_be_bytes([n[0], n[1], n[2], n[3]]) >= 20)
        {
            return Ok(None);
        }
        let fat = MachOFatFile::<FatArch32>::parse(file).map_err(|e| e.to_string())?;
        return fat_slices(file, fat.arches()).map(Some);
    }
    if be == object::macho::FAT_MAGIC_64 {
        let fat = MachOFatFile::<FatArch64>::parse(file).map_err(|e| e.to_string())?;
        return fat_slices(file, fat.arches()).map(Some);
    }
    match le {
        object::macho::MH_MAGIC_64 | object::macho::MH_MAGIC => {
            let word = |at: usize| {
                file.get(at..at + 4)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .ok_or("a truncated Mach-O header")
            };
            let arch = Arch::of(word(4)?, word(8)?);
            Ok(Some(vec![Slice { arch, data: file }]))
        }
        _ => Ok(None),
    }
}

fn fat_slices<'a, A: FatArch>(file: &'a [u8], arches: &[A]) -> Result<Vec<Slice<'a>>, String> {
    arches
        .iter()
        .map(|a| {
            let data = a.data(file).map_err(|e| e.to_string())?;
            let arch = Arch::of(a.cputype().0, a.cpusubtype().0);
            Ok(Slice { arch, data })
        })
        .collect()
}

/// What a slice's code signature says about loading a library into it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Signature {
    /// The CodeDirectory's flags (`CS_RUNTIME`...).
    pub flags: u32,
    /// Its `platform` field: non-zero for Apple's own binaries.
    pub platform: u8,
    /// The XML entitlements, if it has any.
    pub entitlements: Option<String>,
}

/// `CS_RUNTIME`: signed with the hardened runtime.
pub const CS_RUNTIME: u32 = 0x0001_0000;
/// `CS_RESTRICT`: dyld treats the process as restricted.
pub const CS_RESTRICT: u32 = 0x0000_0800;
/// `CS_REQUIRE_LV`: library validation, without the hardened runtime.
pub const CS_REQUIRE_LV: u32 = 0x0000_2000;

/// The embedded signature's magic numbers and slot types (xnu's
/// `osfmk/kern/cs_blobs.h`).
const CSMAGIC_EMBEDDED_SIGNATURE: u32 = 0xfade_0cc0;
const CSMAGIC_CODEDIRECTORY: u32 = 0xfade_0c02;
const CSMAGIC_EMBEDDED_ENTITLEMENTS: u32 = 0xfade_7171;
const CSSLOT_CODEDIRECTORY: u32 = 0;
const CSSLOT_ENTITLEMENTS: u32 = 5;

/// The code signature of one thin 64-bit slice; `Ok(None)` when it has
/// none (or is not a 64-bit slice).
pub fn signature(slice: &[u8]) -> Result<Option<Signature>, String> {
    let Ok(header) = MachHeader64::<Endianness>::parse(slice, 0) else {
        return Ok(None);
    };
    let endian = header.endian().map_err(|e| e.to_string())?;
    let mut commands = header
        .load_commands(endian, slice, 0)
        .map_err(|e| e.to_string())?;
    let mut blob = None;
    while let Some(command) = commands.next().map_err(|e| e.to_string())? {
        if command.cmd() == LC_CODE_SIGNATURE {
            let linkedit = command
                .data::<object::macho::LinkeditDataCommand<Endianness>>()
                .map_err(|e| e.to_string())?;
            let (off, size) = (linkedit.dataoff.get(endian), linkedit.datasize.get(endian));
            blob = slice.get(off as usize..(off as usize).saturating_add(size as usize));
            if blob.is_none() {
                return Err("the code signature lies outside the file".to_owned());
            }
        }
    }
    blob.map(parse_superblob).transpose()
}

/// A big-endian word of a signature blob.
fn be32(blob: &[u8], at: usize) -> Result<u32, String> {
    blob.get(at..at + 4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| "a truncated code signature".to_owned())
}

/// The embedded signature ("superblob"): an index of blobs by slot.
fn parse_superblob(blob: &[u8]) -> Result<Signature, String> {
    if be32(blob, 0)? != CSMAGIC_EMBEDDED_SIGNATURE {
        return Err("the code signature is not an embedded signature".to_owned());
    }
    let count = be32(blob, 8)? as usize;
    let mut out = Signature::default();
    let mut directory = false;
    for i in 0..count.min(64) {
        let (slot, offset) = (be32(blob, 12 + 8 * i)?, be32(blob, 16 + 8 * i)? as usize);
        let part = blob
            .get(offset..)
            .ok_or("a code signature blob outside it")?;
        let magic = be32(part, 0)?;
        let length = (be32(part, 4)? as usize).min(part.len());
        match (slot, magic) {
            (CSSLOT_CODEDIRECTORY, CSMAGIC_CODEDIRECTORY) => {
                out.flags = be32(part, 12)?;
                out.platform = *part.get(38).ok_or("a truncated code directory")?;
                directory = true;
            }
            (CSSLOT_ENTITLEMENTS, CSMAGIC_EMBEDDED_ENTITLEMENTS) => {
                let xml = part.get(8..length).unwrap_or_default();
                out.entitlements = Some(String::from_utf8_lossy(xml).into_owned());
            }
            _ => {}
        }
    }
    if !directory {
        return Err("the code signature has no code directory".to_owned());
    }
    Ok(out)
}

impl Signature {
    /// Whether the entitlement `key` is present and true.
    pub fn entitled(&self, key: &str) -> bool {
        let Some(xml) = &self.entitlements else {
            return false;
        };
        let tag = format!("<key>{key}</key>");
        xml.find(&tag)
            .is_some_and(|at| xml[at + tag.len()..].trim_start().starts_with("<true/>"))
    }
}

#[cfg(test)]
#[path = "../../../build/universal.rs"]
mod universal;

#[cfg(test)]
pub mod fixtures {
    //! Constructed Mach-O files, for the tests here and in `dyld_rules.rs`.

    use super::*;

    /// A thin 64-bit Mach-O file of `arch`, with a code signature of
    /// `flags`, `platform` and `entitlements` when `flags` is `Some`.
    pub fn thin(arch: Arch, signed: Option<(u32, u8, Option<&str>)>) -> Vec<u8> {
        let (cputype, subtype) = match arch {
            Arch::X86_64 => (CPU_TYPE_X86_64.0, 3),
            Arch::Arm64 => (CPU_TYPE_ARM64.0, 0),
            // With the pointer-authentication ABI bits in the high byte,
            // as Apple's binaries have them.
            Arch::Arm64e => (CPU_TYPE_ARM64.0, 0x8000_0002),
            Arch::Other(cputype) => (cputype, 0),
        };
        let mut file = Vec::new();
        let mut le = |v: u32| file.extend_from_slice(&v.to_le_bytes());
        let commands = if signed.is_some() { 1 } else { 0 };
        // magic, cputype, cpusubtype, filetype (MH_EXECUTE), ncmds,
        // sizeofcmds, flags, reserved
        for v in [
            0xfeed_facf,
            cputype,
            subtype,
            2,
            commands,
            16 * commands,
            0,
            0,
        ] {
            le(v);
        }
        let Some((flags, platform, entitlements)) = signed else {
            return file;
        };
        let sig_at = 32 + 16 + 16; // header, the command, some padding
        for v in [LC_CODE_SIGNATURE.0, 16, sig_at as u32, 0] {
            file.extend_from_slice(&v.to_le_bytes());
        }
        file.resize(sig_at, 0);
        let blob = superblob(flags, platform, entitlements);
        let size = blob.len() as u32;
        file[44..48].copy_from_slice(&size.to_le_bytes());
        file.extend_from_slice(&blob);
        file
    }

    /// An embedded signature: a code directory and, if given, XML
    /// entitlements.
    pub fn superblob(flags: u32, platform: u8, entitlements: Option<&str>) -> Vec<u8> {
        let mut directory = Vec::new();
        // magic, length, version, flags, then the rest of the 0x20400
        // fixed part (hashOffset...); `platform` is byte 38.
        for v in [CSMAGIC_CODEDIRECTORY, 88, 0x20400, flags] {
            directory.extend_from_slice(&v.to_be_bytes());
        }
        directory.resize(88, 0);
        directory[38] = platform;
        let mut blobs = vec![(CSSLOT_CODEDIRECTORY, directory)];
        if let Some(xml) = entitlements {
            let mut e = Vec::new();
            e.extend_from_slice(&CSMAGIC_EMBEDDED_ENTITLEMENTS.to_be_bytes());
            e.extend_from_slice(&(8 + xml.len() as u32).to_be_bytes());
            e.extend_from_slice(xml.as_bytes());
            blobs.push((CSSLOT_ENTITLEMENTS, e));
        }
        let mut out = Vec::new();
        let head = 12 + 8 * blobs.len();
        let total = head + blobs.iter().map(|(_, b)| b.len()).sum::<usize>();
        for v in [CSMAGIC_EMBEDDED_SIGNATURE, total as u32, blobs.len() as u32] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        let mut at = head;
        for (slot, blob) in &blobs {
            out.extend_from_slice(&slot.to_be_bytes());
            out.extend_from_slice(&(at as u32).to_be_bytes());
            at += blob.len();
        }
        for (_, blob) in blobs {
            out.extend_from_slice(&blob);
        }
        out
    }

    /// A universal file of `slices`, built as `cli/build.rs` builds the
    /// preload library.
    pub fn fat(slices: &[Vec<u8>]) -> Vec<u8> {
        super::universal::universal(slices).unwrap()
    }

    /// Entitlements granting `keys`.
    pub fn plist(keys: &[&str]) -> String {
        let entries: String = keys
            .iter()
            .map(|k| format!("\t<key>{k}</key>\n\t<true/>\n"))
            .collect();
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<plist version=\"1.0\">\n<dict>\n\
             {entries}</dict>\n</plist>\n"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn a_universal_file_lists_each_slice_with_its_bytes() {
        let arm = thin(Arch::Arm64, None);
        let intel = thin(Arch::X86_64, None);
        let file = fat(&[arm.clone(), intel.clone()]);
        let got = slices(&file).unwrap().unwrap();
        assert_eq!(
            got.iter().map(|s| s.arch).collect::<Vec<_>>(),
            [Arch::Arm64, Arch::X86_64]
        );
        // Each slice copied whole, at a 16 KiB boundary.
        assert_eq!((got[0].data, got[1].data), (&arm[..], &intel[..]));
        for s in &got {
            assert_eq!(
                (s.data.as_ptr() as usize - file.as_ptr() as usize) % 16384,
                0
            );
        }
        assert!(universal::universal(&[b"#!/bin/sh\n".to_vec()]).is_err());
    }

    #[test]
    fn a_thin_file_is_one_slice_and_arm64e_is_told_from_arm64() {
        for arch in [Arch::Arm64, Arch::Arm64e, Arch::X86_64, Arch::Other(7)] {
            let file = thin(arch, None);
            let got = slices(&file).unwrap().unwrap();
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].arch, arch);
        }
        // Not Mach-O: a script, an ELF file, a Java class, nothing.
        for other in [
            &b"#!/usr/bin/env python3\n"[..],
            b"\x7fELF\x02\x01\x01",
            b"\xca\xfe\xba\xbe\x00\x00\x00\x34",
            b"",
        ] {
            assert!(slices(other).unwrap().is_none(), "{other:?}");
        }
    }

    #[test]
    fn the_code_signature_gives_flags_platform_and_entitlements() {
        let key = "com.apple.security.cs.allow-dyld-environment-variables";
        let xml = plist(&[key]);
        let file = thin(Arch::Arm64, Some((CS_RUNTIME, 0, Some(&xml))));
        let sig = signature(&file).unwrap().unwrap();
        assert_eq!(sig.flags, CS_RUNTIME);
        assert_eq!(sig.platform, 0);
        assert!(sig.entitled(key));
        assert!(!sig.entitled("com.apple.security.cs.disable-library-validation"));

        let apple = thin(Arch::Arm64e, Some((CS_RUNTIME, 14, None)));
        let sig = signature(&apple).unwrap().unwrap();
        assert_eq!((sig.platform, sig.entitlements), (14, None));

        assert_eq!(signature(&thin(Arch::Arm64, None)).unwrap(), None);
        // A key present but false grants nothing.
        let denied = plist(&[]).replace("<dict>\n", &format!("<dict>\n<key>{key}</key><false/>"));
        let file = thin(Arch::Arm64, Some((CS_RUNTIME, 0, Some(&denied))));
        assert!(!signature(&file).unwrap().unwrap().entitled(key));
    }

    #[test]
    fn a_damaged_signature_is_an_error_not_a_panic() {
        let mut file = thin(Arch::Arm64, Some((CS_RUNTIME, 0, None)));
        let whole = file.len();
        file.truncate(whole - 40);
        assert!(signature(&file).is_err());
        let mut file = thin(Arch::Arm64, Some((CS_RUNTIME, 0, None)));
        file[64] ^= 0xff; // the superblob's magic
        assert!(signature(&file).is_err());
    }
}
