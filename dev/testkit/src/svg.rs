//! What a flamegraph SVG draws, read back for comparison: two graphs
//! drawn by different programs (btprof and `inferno-flamegraph`) from the
//! same data must have the same frames, whatever their colours.

/// `(name, samples, x, y, width)` of a frame, as the SVG writes them.
pub type Frame = (String, String, String, String, String);

/// Every frame of an `inferno` SVG, sorted. The samples are the first
/// word of the frame's title after its name (`parse (12 samples, 60%)`
/// gives `12`), so a differential graph's deltas, which depend on how
/// its base was scaled, are left out.
pub fn flamegraph_frames(svg: &str) -> Vec<Frame> {
    let attr = |tag: &str, name: &str| -> String {
        let start = tag.find(&format!(" {name}=\"")).expect(name) + name.len() + 3;
        tag[start..start + tag[start..].find('"').unwrap()].to_owned()
    };
    let mut frames: Vec<_> = svg
        .split("<g><title>")
        .skip(1)
        .map(|g| {
            let (title, rest) = g.split_once("</title>").unwrap();
            let rect = &rest[..rest.find("/>").unwrap()];
            let (name, count) = title.rsplit_once(" (").unwrap();
            let count = count.split(' ').next().unwrap().to_owned();
            (
                name.to_owned(),
                count,
                attr(rect, "x"),
                attr(rect, "y"),
                attr(rect, "width"),
            )
        })
        .collect();
    frames.sort();
    frames
}
