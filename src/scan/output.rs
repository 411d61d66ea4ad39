//! A scan's report: each object's verdict as it comes (or, for the table
//! and PolicyReports, gathered), then a summary per policy and binding.
//!
//! Unchanged objects are counted, not kept, so what a scan holds grows
//! with what the policies would change, not with the cluster.

use super::evaluate::{Change, Verdict};
use super::fix::FixOutcome;
use super::Scanned;
use crate::reports::{result_entry, ResultFields, MAX_RESULTS};
use serde_json::{json, Value as Json};
use std::collections::BTreeMap;
use std::io::Write;
use std::time::SystemTime;

/// How the report is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns, as kubectl prints, then the summary.
    #[default]
    Table,
    /// One JSON document: `items` (one per object), then `summary`.
    Json,
    /// The same document as YAML.
    Yaml,
    /// One line per changed object: its identity and the JSON patch that
    /// makes the change (`kubectl patch --type json -p ...`).
    Patch,
    /// wg-policy PolicyReports (one per namespace, a ClusterPolicyReport
    /// for cluster-scoped objects), as YAML.
    Policyreport,
}

/// The report name scans write (`--write-reports`, `-o policyreport`).
pub const SCAN_REPORT_NAME: &str = "kmutate-scan";

/// How many objects got each verdict, and what each binding would do.
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Objects evaluated.
    pub objects: u64,
    /// Objects the policies would change.
    pub would_change: u64,
    /// Objects whose creation (or update) would be denied.
    pub would_deny: u64,
    /// Objects left as they are.
    pub unchanged: u64,
    /// Objects that could not be evaluated.
    pub errors: u64,
    /// Changes written back (`--fix`).
    #[serde(skip_serializing_if = "is_zero")]
    pub fixed: u64,
    /// Changes the API server refused in place, or that failed (`--fix`).
    #[serde(skip_serializing_if = "is_zero")]
    pub not_fixed: u64,
    /// Per policy and binding.
    pub bindings: Vec<BindingSummary>,
    /// Resources left out, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedResource>,
    /// Whether the scan was interrupted (the report is partial).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What one binding would do over the scan.
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BindingSummary {
    /// The policy.
    pub policy: String,
    /// The binding.
    pub binding: String,
    /// Objects it would change.
    pub would_change: u64,
    /// Objects it would deny.
    pub would_deny: u64,
}

/// A resource a scan left out.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SkippedResource {
    /// `plural.group`.
    pub resource: String,
    /// The API server's message.
    pub reason: String,
    /// Whether only because the caller may not list it.
    pub forbidden: bool,
}

/// Writes a scan's report to `out` as the objects come.
pub struct Reporter<W: Write> {
    format: Format,
    out: W,
    show_unchanged: bool,
    rows: Vec<[String; 5]>,
    items_written: u64,
    reports: BTreeMap<String, Vec<Json>>,
    keep_reports: bool,
    /// Results left out of full reports.
    pub dropped_results: u64,
    per_binding: BTreeMap<(String, String), BindingSummary>,
    summary: Summary,
}

impl<W: Write> Reporter<W> {
    /// A report in `format` on `out`; unchanged objects are listed too
    /// with `show_unchanged`.
    pub fn new(format: Format, out: W, show_unchanged: bool) -> Reporter<W> {
        Reporter {
            format,
            out,
            show_unchanged,
            rows: Vec::new(),
            items_written: 0,
            reports: BTreeMap::new(),
            keep_reports: format == Format::Policyreport,
            dropped_results: 0,
            per_binding: BTreeMap::new(),
            summary: Summary::default(),
        }
    }

    /// Also gathers the PolicyReport results (to write them to the cluster).
    pub fn keeping_reports(mut self) -> Reporter<W> {
        self.keep_reports = true;
        self
    }

    /// The summary so far.
    pub fn summary(&self) -> &Summary {
        &self.summary
    }

    /// A resource left out.
    pub fn skipped(&mut self, resource: &str, reason: &str, forbidden: bool) {
        self.summary.skipped.push(SkippedResource {
            resource: resource.into(),
            reason: reason.into(),
            forbidden,
        });
    }

    /// One object's verdict, and what writing it back did.
    pub fn object(&mut self, scanned: &Scanned, fix: Option<&FixOutcome>) -> std::io::Result<()> {
        self.count(scanned, fix);
        let unchanged = scanned.verdict == Verdict::Unchanged;
        if unchanged && !self.show_unchanged {
            return Ok(());
        }
        match self.format {
            Format::Table => self.rows.push(row(scanned, fix)),
            Format::Json | Format::Yaml => {
                let item = item(scanned, fix);
                self.write_item(&item)?;
            }
            Format::Patch => {
                if let Verdict::Change { patch, .. } = &scanned.verdict {
                    if !patch.0.is_empty() {
                        let s = &scanned.subject;
                        let line = json!({"apiVersion": s.api_version, "kind": s.kind,
                            "namespace": s.namespace, "name": s.name, "patch": patch});
                        writeln!(self.out, "{line}")?;
                    }
                }
            }
            Format::Policyreport => {}
        }
        self.gather_results(scanned);
        Ok(())
    }

    fn count(&mut self, scanned: &Scanned, fix: Option<&FixOutcome>) {
        let s = &mut self.summary;
        s.objects += 1;
        match &scanned.verdict {
            Verdict::Unchanged => s.unchanged += 1,
            Verdict::Change { .. } => s.would_change += 1,
            Verdict::Denied { .. } => s.would_deny += 1,
            Verdict::Error(_) => s.errors += 1,
        }
        match fix {
            Some(FixOutcome::Fixed { .. }) => s.fixed += 1,
            Some(FixOutcome::NothingToDo { .. }) | None => {}
            Some(_) => s.not_fixed += 1,
        }
        let (changes, cause) = match &scanned.verdict {
            Verdict::Change { changes, .. } => (changes.as_slice(), None),
            Verdict::Denied { changes, cause, .. } => (changes.as_slice(), cause.as_ref()),
            _ => (&[][..], None),
        };
        for c in changes {
            self.binding_summary(&c.policy, &c.binding).would_change += 1;
        }
        if let Some((policy, binding)) = cause {
            self.binding_summary(policy, binding).would_deny += 1;
        }
    }

    fn binding_summary(&mut self, policy: &str, binding: &str) -> &mut BindingSummary {
        self.per_binding
            .entry((policy.to_string(), binding.to_string()))
            .or_insert_with(|| BindingSummary {
                policy: policy.into(),
                binding: binding.into(),
                ..BindingSummary::default()
            })
    }

    fn write_item(&mut self, item: &Json) -> std::io::Result<()> {
        let first = self.items_written == 0;
        self.items_written += 1;
        match self.format {
            Format::Json => {
                if first {
                    writeln!(
                        self.out,
                        "{{\"apiVersion\":\"kmutate.dev/v1\",\"kind\":\"ScanReport\",\"items\":["
                    )?;
                } else {
                    writeln!(self.out, ",")?;
                }
                write!(self.out, "{item}")
            }
            _ => {
                if first {
                    writeln!(
                        self.out,
                        "apiVersion: kmutate.dev/v1\nkind: ScanReport\nitems:"
                    )?;
                }
                let text = serde_saphyr::to_string(item).map_err(std::io::Error::other)?;
                for (i, line) in text.lines().enumerate() {
                    let lead = if i == 0 { "- " } else { "  " };
                    writeln!(self.out, "{lead}{line}")?;
                }
                Ok(())
            }
        }
    }

    /// Keeps the PolicyReport results of `scanned` (at most
    /// [`MAX_RESULTS`] a report, the rest counted).
    fn gather_results(&mut self, scanned: &Scanned) {
        if !self.keep_reports {
            return;
        }
        let results = results_of(scanned, SystemTime::now());
        let report = self
            .reports
            .entry(scanned.subject.namespace.clone())
            .or_default();
        for r in results {
            if report.len() < MAX_RESULTS {
                report.push(r);
            } else {
                self.dropped_results += 1;
            }
        }
    }

    /// Ends the report: the table or the document's end, and the summary
    /// (the table's own; on `summary_out` for the other formats). Returns
    /// the summary and the PolicyReports' results by namespace.
    pub fn finish(
        mut self,
        interrupted: bool,
        summary_out: &mut dyn Write,
    ) -> std::io::Result<(Summary, BTreeMap<String, Vec<Json>>)> {
        self.summary.interrupted = interrupted;
        self.summary.bindings = std::mem::take(&mut self.per_binding)
            .into_values()
            .collect();
        match self.format {
            Format::Table => {
                let header = ["NAMESPACE", "KIND", "NAME", "RESULT", "DETAILS"].map(String::from);
                if !self.rows.is_empty() {
                    write_table(&mut self.out, &header, &self.rows)?;
                    writeln!(self.out)?;
                }
                write_summary(&mut self.out, &self.summary)?;
            }
            Format::Json => {
                let summary =
                    serde_json::to_string(&self.summary).map_err(std::io::Error::other)?;
                if self.items_written == 0 {
                    writeln!(self.out, "{{\"apiVersion\":\"kmutate.dev/v1\",\"kind\":\"ScanReport\",\"items\":[],\"summary\":{summary}}}")?;
                } else {
                    writeln!(self.out, "\n],\"summary\":{summary}}}")?;
                }
                write_summary(summary_out, &self.summary)?;
            }
            Format::Yaml => {
                if self.items_written == 0 {
                    writeln!(
                        self.out,
                        "apiVersion: kmutate.dev/v1\nkind: ScanReport\nitems: []"
                    )?;
                }
                let summary = serde_saphyr::to_string(&json!({"summary": &self.summary}))
                    .map_err(std::io::Error::other)?;
                write!(self.out, "{summary}")?;
                write_summary(summary_out, &self.summary)?;
            }
            Format::Patch => write_summary(summary_out, &self.summary)?,
            Format::Policyreport => {
                for (namespace, results) in &self.reports {
                    let report = crate::reports::report_object(
                        namespace,
                        SCAN_REPORT_NAME,
                        results.clone(),
                        None,
                    );
                    let text = serde_saphyr::to_string(&report).map_err(std::io::Error::other)?;
                    write!(self.out, "---\n{text}")?;
                }
                write_summary(summary_out, &self.summary)?;
            }
        }
        self.out.flush()?;
        Ok((self.summary, self.reports))
    }
}

/// The PolicyReport results of one object: a `warn` per binding that would
/// change it, a `fail` for a denial, an `error` when it could not be
/// evaluated.
pub fn results_of(scanned: &Scanned, at: SystemTime) -> Vec<Json> {
    let subject = &scanned.subject;
    let entry = |policy: &str, rule: &str, result: &str, message: String, c: Option<&Change>| {
        result_entry(&ResultFields {
            subject,
            policy,
            rule,
            result,
            message,
            set: c.map_or(&[][..], |c| c.set.as_slice()),
            removed: c.map_or(&[][..], |c| c.removed.as_slice()),
            at,
        })
    };
    match &scanned.verdict {
        Verdict::Unchanged => Vec::new(),
        Verdict::Change { changes, .. } => changes
            .iter()
            .map(|c| {
                let message = format!("would {}", change_text(c));
                entry(&c.policy, &c.binding, "warn", message, Some(c))
            })
            .collect(),
        Verdict::Denied { message, cause, .. } => {
            let (policy, binding) = cause.clone().unwrap_or_default();
            let message = format!("would be denied: {message}");
            vec![entry(&policy, &binding, "fail", message, None)]
        }
        Verdict::Error(message) => vec![entry("", "", "error", message.clone(), None)],
    }
}

/// `set a, b; remove c` (with `(monitor mode)` for a monitored binding).
fn change_text(c: &Change) -> String {
    let mut parts = Vec::new();
    if !c.set.is_empty() {
        parts.push(format!("set {}", c.set.join(", ")));
    }
    if !c.removed.is_empty() {
        parts.push(format!("remove {}", c.removed.join(", ")));
    }
    let mut text = parts.join("; ");
    if c.monitored {
        text.push_str(" (monitor mode: not applied)");
    }
    text
}

/// The result word of a verdict, as the table shows it.
fn result_word(verdict: &Verdict, fix: Option<&FixOutcome>) -> &'static str {
    match (verdict, fix) {
        (_, Some(FixOutcome::Fixed { dry_run: true, .. })) => "fixed (dry run)",
        (_, Some(FixOutcome::Fixed { .. })) => "fixed",
        (_, Some(FixOutcome::NothingToDo { .. })) => "nothing to fix",
        (_, Some(FixOutcome::Conflict { .. })) => "conflict",
        (_, Some(FixOutcome::Refused { .. })) => "refused in place",
        (_, Some(FixOutcome::Failed { .. })) => "fix failed",
        (Verdict::Unchanged, None) => "unchanged",
        (Verdict::Change { .. }, None) => "would change",
        (Verdict::Denied { .. }, None) => "would be denied",
        (Verdict::Error(_), None) => "error",
    }
}

/// The longest DETAILS cell of the table (the full text is in -o json).
const DETAILS_WIDTH: usize = 160;

fn row(scanned: &Scanned, fix: Option<&FixOutcome>) -> [String; 5] {
    let s = &scanned.subject;
    let mut details = match &scanned.verdict {
        Verdict::Unchanged => String::new(),
        Verdict::Change { changes, .. } => changes
            .iter()
            .map(|c| format!("{}: {}", who(c), change_text(c)))
            .collect::<Vec<_>>()
            .join("; "),
        Verdict::Denied { message, .. } => message.clone(),
        Verdict::Error(message) => message.clone(),
    };
    match fix {
        Some(FixOutcome::Refused { message, owner }) => {
            details = match owner {
                Some(owner) => format!("owned by {owner}: {message}"),
                None => message.clone(),
            }
        }
        Some(FixOutcome::Conflict { message } | FixOutcome::Failed { message }) => {
            details = message.clone()
        }
        Some(FixOutcome::NothingToDo { reason }) => details = reason.clone(),
        _ => {}
    }
    if details.chars().count() > DETAILS_WIDTH {
        details = details.chars().take(DETAILS_WIDTH - 3).collect::<String>() + "...";
    }
    let namespace = if s.namespace.is_empty() {
        ""
    } else {
        &s.namespace
    };
    [
        namespace.to_string(),
        s.kind.clone(),
        s.name.clone(),
        result_word(&scanned.verdict, fix).to_string(),
        details,
    ]
}

/// `policy` or `policy (binding b)`.
fn who(c: &Change) -> String {
    if c.binding == c.policy {
        c.policy.clone()
    } else {
        format!("{} (binding {})", c.policy, c.binding)
    }
}

fn item(scanned: &Scanned, fix: Option<&FixOutcome>) -> Json {
    let s = &scanned.subject;
    let mut item = json!({"apiVersion": s.api_version, "kind": s.kind, "name": s.name,
        "resource": scanned.resource});
    if !s.namespace.is_empty() {
        item["namespace"] = json!(s.namespace);
    }
    let (result, changes, message, patch) = match &scanned.verdict {
        Verdict::Unchanged => ("unchanged", None, None, None),
        Verdict::Change { changes, patch } => ("change", Some(changes), None, Some(patch)),
        Verdict::Denied {
            message, changes, ..
        } => ("deny", Some(changes), Some(message), None),
        Verdict::Error(message) => ("error", None, Some(message), None),
    };
    item["result"] = json!(result);
    if let Some(changes) = changes.filter(|c| !c.is_empty()) {
        item["changes"] = json!(changes);
    }
    if let Some(message) = message {
        item["message"] = json!(message);
    }
    if let Some(patch) = patch.filter(|p| !p.0.is_empty()) {
        item["patch"] = json!(patch);
    }
    if let Some(fix) = fix {
        item["fix"] = json!(fix);
    }
    item
}

/// Columns padded to their widest cell, separated by three spaces.
fn write_table(
    out: &mut dyn Write,
    header: &[String; 5],
    rows: &[[String; 5]],
) -> std::io::Result<()> {
    let mut widths = header.clone().map(|h| h.chars().count());
    for r in rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for r in std::iter::once(header).chain(rows) {
        let mut line = String::new();
        for (i, (cell, w)) in r.iter().zip(widths).enumerate() {
            if i + 1 == r.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}   "));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// The per-binding table and the totals.
pub fn write_summary(out: &mut dyn Write, summary: &Summary) -> std::io::Result<()> {
    if !summary.bindings.is_empty() {
        let header = ["POLICY", "BINDING", "WOULD CHANGE", "WOULD DENY"].map(String::from);
        let rows: Vec<[String; 5]> = summary
            .bindings
            .iter()
            .map(|b| {
                [
                    b.policy.clone(),
                    b.binding.clone(),
                    b.would_change.to_string(),
                    b.would_deny.to_string(),
                    String::new(),
                ]
            })
            .collect();
        let header = [
            header[0].clone(),
            header[1].clone(),
            header[2].clone(),
            header[3].clone(),
            String::new(),
        ];
        write_table(out, &header, &rows)?;
        writeln!(out)?;
    }
    for s in &summary.skipped {
        let why = if s.forbidden {
            "not allowed to list"
        } else {
            "cannot list"
        };
        writeln!(out, "skipped {}: {why}: {}", s.resource, s.reason)?;
    }
    let mut line = format!(
        "{} objects scanned: {} would change, {} would be denied, {} unchanged, {} errors",
        summary.objects,
        summary.would_change,
        summary.would_deny,
        summary.unchanged,
        summary.errors
    );
    if summary.fixed + summary.not_fixed > 0 {
        line.push_str(&format!(
            "; {} fixed, {} not fixed",
            summary.fixed, summary.not_fixed
        ));
    }
    if summary.interrupted {
        line.push_str(" (interrupted: partial report)");
    }
    writeln!(out, "{line}")
}
