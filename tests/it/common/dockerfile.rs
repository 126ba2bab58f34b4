//! deploy/Dockerfile, read without a container engine: its global build arguments, its stages and
//! their instructions, for the checks of tests/it/image_recipe.rs and the image that tests/it/image.rs
//! builds.

use std::collections::BTreeMap;
use std::path::Path;

/// One Dockerfile instruction: the keyword and the rest, continuation lines joined.
pub fn instructions(dockerfile: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in dockerfile.lines() {
        let line = line.trim();
        if current.is_empty() && (line.is_empty() || line.starts_with('#')) {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
            continue;
        }
        current.push_str(line);
        let (keyword, rest) = current.split_once(' ').unwrap_or((&current, ""));
        out.push((keyword.to_ascii_uppercase(), rest.trim().to_owned()));
        current.clear();
    }
    out
}

/// One stage: what its FROM says (`from`, as written) and names (`AS name`), its base with the
/// global build arguments at their defaults, and its instructions after the FROM.
pub struct Stage {
    pub from: String,
    pub base: String,
    pub name: Option<String>,
    pub instructions: Vec<(String, String)>,
}

/// The Dockerfile read: the global build arguments (the ARGs before the first FROM) with their
/// defaults, and the stages in order.
pub struct Dockerfile {
    pub args: BTreeMap<String, String>,
    pub stages: Vec<Stage>,
}

impl Dockerfile {
    pub fn read(path: &Path) -> Dockerfile {
        let text = std::fs::read_to_string(path).unwrap();
        let mut args = BTreeMap::new();
        let mut stages: Vec<Stage> = Vec::new();
        for (keyword, rest) in instructions(&text) {
            match (keyword.as_str(), stages.last_mut()) {
                ("ARG", None) => {
                    let (name, default) = rest
                        .split_once('=')
                        .unwrap_or_else(|| panic!("global ARG {rest} has no default"));
                    args.insert(name.to_owned(), default.to_owned());
                }
                ("FROM", _) => {
                    let words: Vec<&str> = rest.split_whitespace().collect();
                    let (from, name) = match words.as_slice() {
                        [from] => (*from, None),
                        [from, r#as, name] if r#as.eq_ignore_ascii_case("as") => {
                            (*from, Some((*name).to_owned()))
                        }
                        _ => panic!("FROM {rest}"),
                    };
                    let mut base = from.to_owned();
                    for (arg, default) in &args {
                        base = base.replace(&format!("${{{arg}}}"), default);
                    }
                    assert!(!base.contains('$'), "FROM {from}: an undeclared argument");
                    stages.push(Stage {
                        from: from.to_owned(),
                        base,
                        name,
                        instructions: Vec::new(),
                    });
                }
                (_, Some(stage)) => stage.instructions.push((keyword, rest)),
                (_, None) => panic!("{keyword} before the first FROM"),
            }
        }
        assert!(!stages.is_empty(), "no FROM");
        Dockerfile { args, stages }
    }

    /// The stage named `name`.
    pub fn stage(&self, name: &str) -> &Stage {
        self.stages
            .iter()
            .find(|s| s.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no stage {name}"))
    }

    /// The last stage: the image `docker build` makes without `--target`.
    pub fn runtime(&self) -> &Stage {
        self.stages.last().unwrap()
    }
}

/// A COPY: `--from` stage (None for the build context), sources, destination.
pub struct Copy {
    pub from: Option<String>,
    pub sources: Vec<String>,
    pub dest: String,
}

impl Stage {
    pub fn copies(&self) -> Vec<Copy> {
        self.instructions
            .iter()
            .filter(|(k, _)| k == "COPY")
            .map(|(_, rest)| {
                let mut words: Vec<&str> = rest.split_whitespace().collect();
                let dest = words.pop().unwrap().to_owned();
                let from = words
                    .iter()
                    .find_map(|w| w.strip_prefix("--from="))
                    .map(str::to_owned);
                let sources = words
                    .iter()
                    .filter(|w| !w.starts_with("--"))
                    .map(|w| w.to_string())
                    .collect();
                Copy {
                    from,
                    sources,
                    dest,
                }
            })
            .collect()
    }

    /// The JSON array of the last exec-form `keyword` instruction (`CMD ["run", ...]`).
    pub fn exec_form(&self, keyword: &str) -> Vec<String> {
        let (_, rest) = self
            .instructions
            .iter()
            .rev()
            .find(|(k, _)| k == keyword)
            .unwrap_or_else(|| panic!("no {keyword}"));
        serde_json::from_str(rest).unwrap_or_else(|e| panic!("{keyword} is not exec form: {e}"))
    }

    /// The rest of the last `keyword` instruction.
    pub fn last(&self, keyword: &str) -> Option<&str> {
        self.instructions
            .iter()
            .rev()
            .find(|(k, _)| k == keyword)
            .map(|(_, r)| r.as_str())
    }
}
