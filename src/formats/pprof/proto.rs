//! The messages of pprof's `profile.proto`
//! (github.com/google/pprof/blob/main/proto/profile.proto), derived with
//! `prost` so no `protoc` runs at build time. Field numbers and types are
//! the proto's; comments give only what btprof relies on.

/// A whole profile. `string_table[0]` must be `""`; every `i64` "string"
/// field below is an index into `string_table`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    /// What each value of a sample counts, one per value.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// Every stack with its values.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// The modules the locations lie in.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// The code addresses the samples refer to.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// The functions the locations' lines refer to.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Every string of the profile; the other fields hold indices into it.
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// A regular expression of frames a viewer drops (unused: 0).
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    /// A regular expression of frames a viewer keeps (unused: 0).
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    /// When the profile was taken, nanoseconds since the Unix epoch.
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// How long it was taken for.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// What one sampling period is measured in.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// One sampling period, in `period_type` units.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Free-form comments, as string indices.
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// The sample type a viewer shows first.
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// A type and unit, e.g. `samples`/`count` or `cpu`/`nanoseconds`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub struct ValueType {
    /// What is counted (`samples`, `cpu`, `wall`), a string index.
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// Its unit (`count`, `nanoseconds`), a string index.
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// One stack with its values: `location_id[0]` is the leaf.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// The stack's locations, leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per `Profile::sample_type`.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Extra facts about the sample, such as its thread.
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// A key with a string or a number, e.g. `thread` = `worker-1`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    /// The label's name, a string index.
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// A string value, a string index (0 when the value is a number).
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// A numeric value (0 when the value is a string).
    #[prost(int64, tag = "3")]
    pub num: i64,
    /// The numeric value's unit, a string index.
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// A loaded module (executable or shared library).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    /// The mapping's id (not 0), which locations refer to.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Where the module's code starts in memory.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// Where it ends (exclusive).
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// The file offset `memory_start` was mapped from.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// The module's path, a string index.
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// The module's build id, a string index.
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// Locations of this mapping already carry function names: a consumer
    /// must not try to symbolise them again.
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    /// Locations of this mapping carry source file names.
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    /// Locations of this mapping carry line numbers.
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    /// Locations of this mapping carry their inlined functions.
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// One code address, with the function(s) at it: `line[0]` is the
/// innermost inlined function, the last the function the code is in.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    /// The location's id (not 0), which samples refer to.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The mapping the address lies in (0: unknown).
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// The code address.
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// The functions at the address, innermost inlined first.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    /// Whether this location was merged from others (unused).
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

/// A function and a source line in it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Line {
    /// The function the line is in.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// The source line (0: unknown).
    #[prost(int64, tag = "2")]
    pub line: i64,
    /// The source column (0: unknown).
    #[prost(int64, tag = "3")]
    pub column: i64,
}

/// A function: its (demangled) name and source file.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    /// The function's id (not 0), which lines refer to.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Its name, demangled, a string index.
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// Its name as the linker knows it, a string index.
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// Its source file, a string index.
    #[prost(int64, tag = "4")]
    pub filename: i64,
    /// The line it starts at (0: unknown).
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}
