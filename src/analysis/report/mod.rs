//! Reports for people and for machines: a [`DiffReport`](crate::diff::DiffReport)
//! or a profile's top functions as a plain-text table, Markdown (CI logs,
//! pull-request comments) or JSON.

#[path = "diff_report.rs"]
pub mod diff;
#[path = "function_report.rs"]
pub mod functions;
mod table;

/// An output format for reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Format {
    /// Aligned columns for a terminal.
    #[default]
    Text,
    /// GitHub-flavoured Markdown.
    Markdown,
    /// One JSON document.
    Json,
}

/// A diff report in `format`. Text and Markdown show the first `rows`
/// functions (all when `None`) and every regressed one; JSON has all.
pub fn diff_report(
    report: &crate::diff::DiffReport,
    format: Format,
    rows: Option<usize>,
) -> String {
    match format {
        Format::Text => diff::text(report, rows),
        Format::Markdown => diff::markdown(report, rows),
        Format::Json => format!("{:#}\n", diff::json(report)),
    }
}

/// A profile's `top` functions by self and by total share in `format`.
pub fn function_report(
    profile: &crate::FoldedProfile,
    table: &crate::functions::FunctionTable,
    top: usize,
    format: Format,
) -> String {
    match format {
        Format::Text => functions::text(profile, table, top),
        Format::Markdown => functions::markdown(profile, table, top),
        Format::Json => format!("{:#}\n", functions::json(profile, table, top)),
    }
}
