//! Reports for people and for machines: a [`DiffReport`]
//! or a profile's top functions as a plain-text table, Markdown (CI logs,
//! pull-request comments) or JSON.

mod diff_report;
mod function_report;
mod table;

use super::diff::DiffReport;
use super::functions::FunctionTable;
use crate::profile::Profile;

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
pub fn diff_report(report: &DiffReport, format: Format, rows: Option<usize>) -> String {
    match format {
        Format::Text => diff_report::text(report, rows),
        Format::Markdown => diff_report::markdown(report, rows),
        Format::Json => format!("{:#}\n", diff_report::json(report)),
    }
}

/// A profile's `top` functions by self and by total share in `format`.
pub fn function_report(
    profile: &Profile,
    table: &FunctionTable,
    top: usize,
    format: Format,
) -> String {
    match format {
        Format::Text => function_report::text(profile, table, top),
        Format::Markdown => function_report::markdown(profile, table, top),
        Format::Json => format!("{:#}\n", function_report::json(profile, table, top)),
    }
}
