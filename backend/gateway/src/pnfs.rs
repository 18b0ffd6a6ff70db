//! pNFS layout types of an NFS export (FSAL_CAIRN's `Layout`, docs/nfs.md "pNFS").

use crate::error::{invalid, Error};
use serde::{Deserialize, Serialize};

/// The layout type a pNFS export hands out: NFSv4.1 FILES (RFC 8881 §13, the default, also
/// for documents stored before the option) or Flexible Files (RFC 8435: the file's replica
/// set as the mirror set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PnfsLayout {
    #[default]
    Files,
    Flexfiles,
}

impl PnfsLayout {
    /// `files` or `flexfiles` (also `flex-files`, `ff`), any case.
    pub fn parse(s: &str) -> Result<PnfsLayout, Error> {
        match s.to_ascii_lowercase().replace(['-', '_'], "").as_str() {
            "files" | "file" => Ok(PnfsLayout::Files),
            "flexfiles" | "ff" => Ok(PnfsLayout::Flexfiles),
            _ => Err(invalid(format!("invalid pNFS layout '{s}': expected files or flexfiles"))),
        }
    }

    /// The token of FSAL_CAIRN's `Layout` option.
    pub fn as_str(self) -> &'static str {
        match self {
            PnfsLayout::Files => "files",
            PnfsLayout::Flexfiles => "flexfiles",
        }
    }

    /// How `cairn nfs export show` names it.
    pub fn describe(self) -> &'static str {
        match self {
            PnfsLayout::Files => "FILES layouts",
            PnfsLayout::Flexfiles => "Flexible Files layouts",
        }
    }

    /// FILES, the default: not stored, so documents read by older gateways stay the same.
    pub fn is_files(&self) -> bool {
        *self == PnfsLayout::Files
    }

    /// The FSAL block's `Layout` line (none for FILES, FSAL_CAIRN's default).
    pub fn render(self) -> String {
        match self {
            PnfsLayout::Files => String::new(),
            PnfsLayout::Flexfiles => format!("        Layout = {};\n", self.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_parse_and_render() {
        assert_eq!(PnfsLayout::parse("FILES").ok(), Some(PnfsLayout::Files));
        assert_eq!(PnfsLayout::parse("flex-files").ok(), Some(PnfsLayout::Flexfiles));
        assert_eq!(PnfsLayout::parse("flexfiles").ok(), Some(PnfsLayout::Flexfiles));
        assert!(PnfsLayout::parse("blocks").unwrap_err().to_string().contains("flexfiles"));
        assert_eq!(PnfsLayout::Files.render(), "");
        assert_eq!(PnfsLayout::Flexfiles.render(), "        Layout = flexfiles;\n");
        assert_eq!(serde_json::to_value(PnfsLayout::Flexfiles).unwrap(), "flexfiles");
    }
}
