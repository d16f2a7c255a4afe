//! Plan files (DESIGN.md "Plans and approval"): `{plans_dir}/{slug}.md` for the main agent,
//! `{plans_dir}/{slug}-agent-{id}.md` for every other agent. The slug is three random words,
//! reserved by creating the main plan file with `create_new`.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::error::{RuntimeError, RuntimeResult};

const ADJECTIVES: &[&str] = &[
    "amber", "brave", "calm", "clever", "crisp", "dapper", "eager", "fancy", "gentle", "glad",
    "golden", "happy", "hidden", "humble", "jolly", "keen", "kind", "lively", "lucky", "merry",
    "misty", "noble", "quiet", "rapid", "rosy", "silent", "silver", "sleek", "snowy", "sunny",
    "swift", "tidy", "vivid", "warm", "wise", "zesty",
];
const VERBS: &[&str] = &[
    "baking",
    "bending",
    "bouncing",
    "building",
    "carving",
    "chasing",
    "climbing",
    "dancing",
    "drifting",
    "folding",
    "gliding",
    "growing",
    "hopping",
    "humming",
    "jumping",
    "knitting",
    "leaping",
    "mending",
    "painting",
    "planting",
    "racing",
    "reading",
    "rolling",
    "sailing",
    "singing",
    "sketching",
    "spinning",
    "swimming",
    "tending",
    "wandering",
    "weaving",
    "whistling",
];
const NOUNS: &[&str] = &[
    "badger", "beacon", "brook", "canyon", "cedar", "comet", "falcon", "fern", "forest", "harbor",
    "heron", "island", "lantern", "maple", "meadow", "otter", "owl", "pebble", "pine", "quartz",
    "raven", "river", "robin", "sparrow", "spruce", "star", "stone", "thistle", "tulip", "valley",
    "willow", "wren",
];

/// How many slugs are tried before giving up.
const SLUG_ATTEMPTS: u32 = 16;

/// A random `adjective-verb-noun` slug.
pub fn random_slug(rng: &mut fastrand::Rng) -> String {
    let pick = |rng: &mut fastrand::Rng, words: &[&'static str]| words[rng.usize(..words.len())];
    format!(
        "{}-{}-{}",
        pick(rng, ADJECTIVES),
        pick(rng, VERBS),
        pick(rng, NOUNS)
    )
}

/// Where a run's plan files live: the plans directory and the run's slug.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanFiles {
    dir: PathBuf,
    slug: String,
}

impl PlanFiles {
    /// The plan files of a run whose slug is already reserved (resume).
    pub fn new(dir: impl Into<PathBuf>, slug: impl Into<String>) -> PlanFiles {
        PlanFiles {
            dir: dir.into(),
            slug: slug.into(),
        }
    }

    /// Picks a fresh slug and reserves it by creating the (empty) main plan file with
    /// `create_new`; a taken name is retried with other words.
    pub fn reserve(dir: &Path, rng: &mut fastrand::Rng) -> RuntimeResult<PlanFiles> {
        std::fs::create_dir_all(dir).map_err(|source| RuntimeError::PlanFile {
            path: dir.to_path_buf(),
            source,
        })?;
        let mut last = String::new();
        for _ in 0..SLUG_ATTEMPTS {
            let slug = random_slug(rng);
            let path = dir.join(format!("{slug}.md"));
            match std::fs::File::options()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(_) => return Ok(PlanFiles::new(dir, slug)),
                Err(error) if error.kind() == ErrorKind::AlreadyExists => last = slug,
                Err(source) => return Err(RuntimeError::PlanFile { path, source }),
            }
        }
        Err(RuntimeError::NoFreeSlug {
            dir: dir.to_path_buf(),
            attempts: SLUG_ATTEMPTS,
            detail: format!("the last slug tried was {last}"),
        })
    }

    pub fn slug(&self) -> &str {
        &self.slug
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The main agent's plan file.
    pub fn main_file(&self) -> PathBuf {
        self.dir.join(format!("{}.md", self.slug))
    }

    /// Any other agent's plan file.
    pub fn agent_file(&self, agent_id: &str) -> PathBuf {
        self.dir.join(format!("{}-agent-{agent_id}.md", self.slug))
    }

    /// Whether `path` (resolved) is any plan file of this directory.
    pub fn contains(&self, path: &Path) -> bool {
        path.starts_with(&self.dir)
    }
}

/// Reads a plan file; a missing file reads as empty.
pub fn read_plan(path: &Path) -> RuntimeResult<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text),
        Err(error) if error.kind() == ErrorKind::NotFound => Ok(String::new()),
        Err(source) => Err(RuntimeError::PlanFile {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Writes a plan file (creating its directory).
pub fn write_plan(path: &Path, plan: &str) -> RuntimeResult<()> {
    let io = |source| RuntimeError::PlanFile {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    std::fs::write(path, plan).map_err(io)
}

/// The sections a plan must have to be submitted.
pub const REQUIRED_SECTIONS: &[&str] = &["Steps", "Files"];

/// The required sections that are missing or empty, in order.
pub fn missing_sections(plan: &str) -> Vec<&'static str> {
    REQUIRED_SECTIONS
        .iter()
        .copied()
        .filter(|section| !has_section(plan, section))
        .collect()
}

fn has_section(plan: &str, section: &str) -> bool {
    let mut inside = false;
    for line in plan.lines() {
        let trimmed = line.trim();
        if let Some(heading) = trimmed.strip_prefix("## ") {
            if inside {
                return false;
            }
            inside = heading.trim().eq_ignore_ascii_case(section);
        } else if inside && !trimmed.is_empty() {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_must_be_present_and_not_empty() {
        let plan = "## Goal\nx\n## Steps\n1. do\n## Files\nsrc/a.rs\n";
        assert!(missing_sections(plan).is_empty());
        assert_eq!(
            missing_sections("## Steps\n\n## Files\n"),
            ["Steps", "Files"]
        );
        assert_eq!(missing_sections("## Steps\n1. a\n"), ["Files"]);
    }

    #[test]
    fn slugs_are_three_words() {
        let mut rng = fastrand::Rng::with_seed(7);
        let slug = random_slug(&mut rng);
        assert_eq!(slug.split('-').count(), 3, "{slug}");
    }
}
