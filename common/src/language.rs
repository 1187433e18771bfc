//! The languages runbox runs, by name and alias.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A language runbox can run. Every one runs inside a Deno child.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    /// CPython on WebAssembly (Pyodide), inside Deno.
    #[serde(alias = "py")]
    Python,
    #[serde(alias = "js")]
    Javascript,
    /// Types are stripped by Deno; they are not checked.
    #[serde(alias = "ts")]
    Typescript,
}

impl Language {
    pub const ALL: [Language; 3] = [Language::Python, Language::Javascript, Language::Typescript];

    pub fn as_str(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::Javascript => "javascript",
            Language::Typescript => "typescript",
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Language {
    type Err = UnknownLanguage;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "python" | "py" => Ok(Language::Python),
            "javascript" | "js" => Ok(Language::Javascript),
            "typescript" | "ts" => Ok(Language::Typescript),
            _ => Err(UnknownLanguage(s.to_owned())),
        }
    }
}

/// A language name that is not one of [`Language::ALL`] or their aliases.
#[derive(Debug, thiserror::Error)]
#[error("unknown language {0:?}: expected python, javascript or typescript (or py, js, ts)")]
pub struct UnknownLanguage(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn language_aliases_parse_in_json_and_text() {
        for (alias, language) in [("py", Language::Python), ("js", Language::Javascript), ("ts", Language::Typescript)]
        {
            let json: Language = serde_json::from_str(&format!("{alias:?}")).expect("alias parses");
            assert_eq!(json, language);
            assert_eq!(alias.parse::<Language>().expect("alias parses"), language);
            assert_eq!(language.as_str().parse::<Language>().expect("name parses"), language);
        }
        assert!("ruby".parse::<Language>().is_err());
    }
}
