//! The rules a call log of the sampling loop must follow, checked call by
//! call.

use super::{Call, Port};

/// Checks the rules of the stopped window and of handle hygiene against a
/// call log, and says which call broke which rule:
///
/// - calls about a thread happen only inside a listing that holds it;
/// - inside a listing, the sampler's own thread is only released, never
///   asked about or stopped;
/// - after a successful stop of a thread, the only calls until its resume
///   are reads of its registers and copies of memory, and it is resumed
///   exactly once; a failed stop is never resumed; memory is never read
///   outside a stopped window;
/// - every port of a listing is released exactly once, after the last call
///   about it, and the listing is released after all of them;
/// - outside listings only the sampler's own CPU time may be read.
pub fn check_protocol(calls: &[Call], own: Port) -> Result<(), String> {
    let mut listing: Option<(u32, Vec<Port>, Vec<bool>)> = None;
    let mut stopped: Option<Port> = None;
    let mut failed_stop: Option<Port> = None;
    for (i, call) in calls.iter().enumerate() {
        if let Some(p) = stopped {
            match *call {
                Call::Registers(q) if q == p => continue,
                Call::CopyMemory { .. } => continue,
                Call::Resume(q) if q == p => {
                    stopped = None;
                    continue;
                }
                _ => {
                    return Err(format!(
                        "call {i} {call:?} while {p} was stopped (no resume yet)"
                    ));
                }
            }
        }
        if let (Some(p), Call::Resume(q)) = (failed_stop, call) {
            if *q == p {
                return Err(format!("call {i}: resumed {p} after its stop failed"));
            }
        }
        match *call {
            Call::List { id, ports, len } => {
                if let Some((open, ..)) = &listing {
                    return Err(format!(
                        "call {i}: listing {id} while {open} is not released"
                    ));
                }
                let ports = ports[..len].to_vec();
                let released = vec![false; ports.len()];
                listing = Some((id, ports, released));
            }
            Call::ReleaseList(id) => {
                let Some((open, ports, released)) = listing.take() else {
                    return Err(format!("call {i}: released listing {id} that is not open"));
                };
                if open != id {
                    return Err(format!("call {i}: released listing {id}, open is {open}"));
                }
                if let Some(k) = released.iter().position(|r| !r) {
                    return Err(format!(
                        "call {i}: listing {id} released but port {} in it never was",
                        ports[k]
                    ));
                }
            }
            Call::CopyMemory { .. } => {
                return Err(format!(
                    "call {i} {call:?}: memory read with no thread stopped"
                ));
            }
            Call::CpuTime(p) if p == own && listing.is_none() => {}
            _ => {
                let p = call.port().expect("a call about a thread");
                let Some((id, ports, released)) = &mut listing else {
                    return Err(format!("call {i} {call:?} outside any listing"));
                };
                let Some(k) = ports.iter().position(|&q| q == p) else {
                    return Err(format!("call {i} {call:?}: port not in listing {id}"));
                };
                if released[k] {
                    return Err(format!("call {i} {call:?}: port already released"));
                }
                match *call {
                    Call::ReleaseThread(_) => released[k] = true,
                    _ if p == own => {
                        return Err(format!("call {i} {call:?}: about the sampler's own thread"));
                    }
                    Call::Stop { ok: true, .. } => {
                        stopped = Some(p);
                        failed_stop = None;
                    }
                    Call::Stop { ok: false, .. } => failed_stop = Some(p),
                    Call::Registers(_) | Call::Resume(_) => {
                        return Err(format!("call {i} {call:?}: thread is not stopped"));
                    }
                    _ => {}
                }
            }
        }
    }
    if let Some(p) = stopped {
        return Err(format!("thread {p} still stopped at the end"));
    }
    if let Some((id, ..)) = listing {
        return Err(format!("listing {id} never released"));
    }
    Ok(())
}
