//! The small XML reader `summarize` needs: crm_mon's output is machine-written and flat.

use std::collections::BTreeMap;

/// One XML start (or empty) tag: its name and attributes.
pub(super) struct Tag {
    pub(super) name: String,
    pub(super) attrs: BTreeMap<String, String>,
    pub(super) closing: bool,
    pub(super) empty: bool,
}

pub(super) fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// The tags of `xml` in order (comments, declarations and text skipped). crm_mon's output
/// is machine-written and flat enough for this; a malformed tag ends the scan.
pub(super) fn tags(xml: &str) -> Vec<Tag> {
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find('<') {
        rest = &rest[start + 1..];
        let Some(end) = rest.find('>') else { break };
        let body = &rest[..end];
        rest = &rest[end + 1..];
        if body.starts_with('?') || body.starts_with('!') {
            continue;
        }
        let closing = body.starts_with('/');
        let body = body.trim_start_matches('/');
        let empty = body.ends_with('/');
        let body = body.trim_end_matches('/');
        let name_end = body.find(char::is_whitespace).unwrap_or(body.len());
        let mut tag =
            Tag { name: body[..name_end].to_string(), attrs: BTreeMap::new(), closing, empty };
        let mut a = &body[name_end..];
        while let Some(eq) = a.find("=\"") {
            let key = a[..eq].trim().to_string();
            let v = &a[eq + 2..];
            let Some(q) = v.find('"') else { break };
            tag.attrs.insert(key, unescape(&v[..q]));
            a = &v[q + 1..];
        }
        out.push(tag);
    }
    out
}

pub(super) fn is_true(t: &Tag, k: &str) -> bool {
    t.attrs.get(k).map(String::as_str) == Some("true")
}
