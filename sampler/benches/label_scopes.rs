//! What entering and leaving a label scope costs a request handler.
//!
//! Each case enters and leaves a scope many times on this thread, with no
//! sampler and with one sampling at 1000 Hz (threads then log each change's
//! time), and reports the median time per enter-and-leave over several
//! rounds, beside a baseline loop in the same run that does everything but
//! the scope. Bars: 50 ns with no sampler, 200 ns with one.
//!
//! `cargo bench -p btprof-sampler --bench label_scopes`. Reports, never
//! gates.
//!
//! Writes its latest results to `docs/results/label_scopes.md`.

#[cfg(target_os = "linux")]
#[path = "../../benches/support/results.rs"]
mod results;

#[cfg(target_os = "linux")]
mod linux {
    use std::hint::black_box;

    use btprof_sampler::labels;
    use btprof_sampler::{Mode, Sampler, SamplerConfig};

    /// Many short rounds, timed on the thread's own CPU clock: on a shared
    /// machine most rounds then run unpreempted, and the median is theirs.
    const ROUNDS: usize = 101;
    const ITERATIONS: u32 = 20_000;

    const CHECKOUT: &[(&str, &str)] = &[("endpoint", "checkout")];
    const SEARCH: &[(&str, &str)] = &[("endpoint", "search")];
    const TENANT: &[(&str, &str)] = &[("tenant", "acme")];

    /// Nanoseconds per iteration of `body`, the median of [`ROUNDS`].
    fn median_ns(mut body: impl FnMut(u32)) -> f64 {
        let mut rounds: Vec<f64> = (0..ROUNDS)
            .map(|_| {
                let start = btprof_testkit::thread_cpu_ns();
                for i in 0..ITERATIONS {
                    body(i);
                }
                (btprof_testkit::thread_cpu_ns() - start) as f64 / f64::from(ITERATIONS)
            })
            .collect();
        rounds.sort_by(f64::total_cmp);
        rounds[ROUNDS / 2]
    }

    /// One scope entered and left per iteration.
    fn one_scope() -> f64 {
        median_ns(|_| drop(black_box(labels::labels(black_box(CHECKOUT)))))
    }

    /// Two scopes taking turns: the thread's cache of sets holds both.
    fn two_scopes() -> f64 {
        median_ns(|i| {
            let which = if i % 2 == 0 { CHECKOUT } else { SEARCH };
            drop(black_box(labels::labels(black_box(which))))
        })
    }

    /// An inner scope inside an outer one, both entered and left.
    fn nested() -> f64 {
        median_ns(|_| {
            let outer = labels::labels(black_box(TENANT));
            drop(black_box(labels::labels(black_box(CHECKOUT))));
            drop(black_box(outer));
        })
    }

    /// Everything but the scope: the loop, the argument and the drop.
    fn baseline() -> f64 {
        median_ns(|i| {
            black_box((black_box(CHECKOUT), i));
        })
    }

    fn cases() -> Vec<(&'static str, f64, u32)> {
        let base = baseline();
        let net = |ns: f64| ns - base;
        vec![
            ("baseline loop", base, 0),
            ("one scope", net(one_scope()), 1),
            ("two scopes taking turns", net(two_scopes()), 1),
            ("a scope inside a scope", net(nested()), 2),
        ]
    }

    pub fn main() {
        let mut out = super::results::Results::new(
            "label_scopes",
            "Label scopes: the cost of entering and leaving one",
            "cargo bench -p btprof-sampler --bench label_scopes",
        );
        let quiet = cases();
        let sampler = Sampler::start(SamplerConfig {
            hz: 1000,
            mode: Mode::Cpu,
            ..SamplerConfig::default()
        })
        .expect("start a sampler");
        let sampling = cases();
        let clock = sampler.stop().map(|raw| raw.stats.clock.to_string());
        let clock = clock.unwrap_or_else(|e| format!("failed: {e}"));
        out.paragraph(&format!(
            "Nanoseconds of the thread's CPU time per enter-and-leave, the median of {ROUNDS} \
             rounds of {ITERATIONS} on one thread, less the baseline loop measured in the same \
             run (its own row). \
             With a sampler, one ran at 1000 Hz in cpu mode on the {clock} clock, so each \
             change also logged its time. Bars: 50 ns per scope with no sampler, 200 with one."
        ));
        let rows: Vec<Vec<String>> = quiet
            .iter()
            .zip(&sampling)
            .map(|((name, without, scopes), (_, with, _))| {
                let per = |ns: f64| match scopes {
                    0 => format!("{ns:.1}"),
                    n => format!("{:.1} ({:.1} per scope)", ns, ns / f64::from(*n)),
                };
                vec![name.to_string(), per(*without), per(*with)]
            })
            .collect();
        out.table(&["case", "no sampler (ns)", "sampler running (ns)"], &rows);
        print!("{}", out.render());
        out.write();
    }
}

#[cfg(target_os = "linux")]
fn main() {
    linux::main();
}

#[cfg(not(target_os = "linux"))]
fn main() {
    println!("label_scopes: Linux only");
}
