//! Policy files: headless approval of plans and permission requests by written rules.
//! Nothing approves by default: `approve_all = true` must be written out.

use std::path::{Path, PathBuf};

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::Serialize;

use crate::diagnostic::{ConfigError, Diagnostic, invalid, suggestion_suffix};
use crate::mode::PermissionMode;
use crate::origin::{Layer, Origin, Sourced};
use crate::rule::{PermissionRule, PermissionRules, RuleBehavior, RuleSubject};
use crate::settings::read_optional;
use crate::toml_source::{Located, SourceText, TableReader};

/// The plan sections DESIGN.md defines.
pub const PLAN_SECTIONS: &[&str] = &["Goal", "Steps", "Files", "Tests", "Risks"];

const POLICY_KEYS: &[&str] = &[
    "required_sections",
    "max_files",
    "allowed_paths",
    "denied_paths",
    "max_mode",
    "approve_all",
    "permissions",
    "require_tests_pass",
];
const PERMISSION_KEYS: &[&str] = &["allow", "deny"];

/// A validated policy file.
#[derive(Debug, Clone, Serialize)]
pub struct Policy {
    pub source: String,
    /// Sections a plan must have (default: Steps and Files).
    pub required_sections: Vec<String>,
    /// The most paths a plan's `## Files` may list.
    pub max_files: Option<u64>,
    /// Globs every planned path must match (none: any path).
    pub allowed_paths: Vec<String>,
    /// Globs no planned path may match.
    pub denied_paths: Vec<String>,
    /// The highest mode this policy grants (default `default`).
    pub max_mode: PermissionMode,
    /// Approve every plan without checks (never a default).
    pub approve_all: bool,
    /// Refuse every merge whose merged result did not pass the team's `[merge] test`.
    pub require_tests_pass: bool,
    /// Rules answering permission requests; an ask no rule matches is denied.
    pub permissions: PermissionRules,
    #[serde(skip)]
    allowed_set: Option<GlobSet>,
    #[serde(skip)]
    denied_set: Option<GlobSet>,
}

/// The policy's answer to a permission request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum PolicyAnswer {
    Allow { rule: String },
    Deny { reason: String },
}

/// One rule of a policy applied to a plan: what the rule says, whether the plan passed it,
/// and what was found. A plan is approved exactly when every check passed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleCheck {
    pub rule: String,
    pub passed: bool,
    pub detail: String,
}

/// The policy's verdict on a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanVerdict {
    pub approved: bool,
    /// Why the plan was rejected, one line each (empty when approved).
    pub reasons: Vec<String>,
    /// The mode granted on approval: the policy's `max_mode`.
    pub granted_mode: PermissionMode,
}

impl Policy {
    /// Reads and validates a policy file.
    pub fn load(path: &Path) -> Result<Policy, ConfigError> {
        let label = path.display().to_string();
        match read_optional(path)? {
            Some(text) => Policy::parse(&label, &text),
            None => Err(ConfigError::invalid(
                Diagnostic::new("policy file not found").in_source(label),
            )),
        }
    }

    /// Parses and validates policy-file text.
    pub fn parse(label: &str, text: &str) -> Result<Policy, ConfigError> {
        let source = SourceText::new(label, text);
        let table = source.parse().map_err(ConfigError::invalid)?;
        let reader = TableReader::root(&source, &table);
        let mut errors = Vec::new();
        reader.reject_unknown(POLICY_KEYS, &mut errors);
        let required_sections = match reader.string_list("required_sections", &mut errors) {
            None => vec!["Steps".to_string(), "Files".to_string()],
            Some(sections) => sections
                .into_iter()
                .filter_map(|section| check_section(&source, section, &mut errors))
                .collect(),
        };
        let max_files = reader
            .count("max_files", &mut errors)
            .map(|count| count.value);
        let allowed = reader
            .string_list("allowed_paths", &mut errors)
            .unwrap_or_default();
        let denied = reader
            .string_list("denied_paths", &mut errors)
            .unwrap_or_default();
        let allowed_set = glob_set(&source, &allowed, &mut errors);
        let denied_set = glob_set(&source, &denied, &mut errors);
        let max_mode = match reader.string("max_mode", &mut errors) {
            None => PermissionMode::Default,
            Some(text) => text
                .value
                .parse::<PermissionMode>()
                .unwrap_or_else(|error| {
                    let suggestion = suggestion_suffix(&text.value, PermissionMode::names());
                    errors.push(located_error(
                        &source,
                        &text,
                        format!("{error}{suggestion}"),
                    ));
                    PermissionMode::Default
                }),
        };
        let approve_all = reader
            .boolean("approve_all", &mut errors)
            .is_some_and(|flag| flag.value);
        let require_tests_pass = reader
            .boolean("require_tests_pass", &mut errors)
            .is_some_and(|flag| flag.value);
        let mut permissions = PermissionRules::default();
        if let Some(table) = reader.table("permissions", &mut errors) {
            table.reject_unknown(PERMISSION_KEYS, &mut errors);
            for behavior in [RuleBehavior::Allow, RuleBehavior::Deny] {
                let rules = table
                    .string_list(behavior.as_str(), &mut errors)
                    .unwrap_or_default();
                for rule in rules {
                    match rule.value.parse::<PermissionRule>() {
                        Ok(parsed) => {
                            let origin = Origin {
                                layer: Layer::Project,
                                source: label.to_string(),
                                position: Some(rule.position),
                            };
                            permissions
                                .list_mut(behavior)
                                .push(Sourced::new(parsed, origin));
                        }
                        Err(error) => errors.push(located_error(&source, &rule, error.to_string())),
                    }
                }
            }
        }
        if !errors.is_empty() {
            return Err(invalid(errors));
        }
        Ok(Policy {
            source: label.to_string(),
            required_sections,
            max_files,
            allowed_paths: allowed.into_iter().map(|glob| glob.value).collect(),
            denied_paths: denied.into_iter().map(|glob| glob.value).collect(),
            max_mode,
            approve_all,
            require_tests_pass,
            permissions,
            allowed_set,
            denied_set,
        })
    }

    /// Answers a permission request: a deny rule beats an allow rule; no matching rule is a
    /// deny ("policy has no rule").
    pub fn answer_permission(&self, tool: &str, subject: RuleSubject<'_>) -> PolicyAnswer {
        match self.permissions.decide(tool, subject) {
            Some((RuleBehavior::Allow, rule)) => PolicyAnswer::Allow {
                rule: rule.value.as_str().to_string(),
            },
            Some((_, rule)) => PolicyAnswer::Deny {
                reason: format!("denied by policy rule `{}`", rule.value),
            },
            None if self.approve_all => PolicyAnswer::Allow {
                rule: "approve_all".to_string(),
            },
            None => PolicyAnswer::Deny {
                reason: "policy has no rule".to_string(),
            },
        }
    }

    /// Checks a plan (Markdown with `## Section` headings) against the policy.
    pub fn review_plan(&self, plan: &str) -> PlanVerdict {
        let mut reasons = Vec::new();
        if !self.approve_all {
            let sections = plan_sections(plan);
            for required in &self.required_sections {
                let present = sections
                    .iter()
                    .any(|(name, body)| name == required && !body.trim().is_empty());
                if !present {
                    reasons.push(format!("missing section `## {required}`"));
                }
            }
            let files = planned_files(&sections);
            reasons.extend(self.path_reasons("`## Files` lists", &files));
        }
        PlanVerdict {
            approved: reasons.is_empty(),
            reasons,
            granted_mode: self.max_mode,
        }
    }

    /// Every rule of the policy applied to `plan`, passed or failed, in the policy's order:
    /// what a reviewer sees beside the plan. Agrees with [`Policy::review_plan`]: the plan is
    /// approved exactly when every check passed.
    pub fn plan_checks(&self, plan: &str) -> Vec<RuleCheck> {
        let check = |rule: String, passed: bool, detail: String| RuleCheck {
            rule,
            passed,
            detail,
        };
        if self.approve_all {
            return vec![check(
                "approve_all = true".into(),
                true,
                "every plan is approved without checks".into(),
            )];
        }
        let sections = plan_sections(plan);
        let mut checks: Vec<RuleCheck> = self
            .required_sections
            .iter()
            .map(|required| {
                let present = sections
                    .iter()
                    .any(|(name, body)| name == required && !body.trim().is_empty());
                let detail = if present {
                    "present"
                } else {
                    "missing or empty"
                };
                check(
                    format!("required section `## {required}`"),
                    present,
                    detail.into(),
                )
            })
            .collect();
        let files = planned_files(&sections);
        if let Some(max) = self.max_files {
            checks.push(check(
                format!("max_files = {max}"),
                files.len() as u64 <= max,
                format!("`## Files` lists {} paths", files.len()),
            ));
        }
        let matching = |set: &Option<GlobSet>, wanted: bool| -> Vec<&str> {
            files
                .iter()
                .map(String::as_str)
                .filter(|file| set.as_ref().is_some_and(|set| set.is_match(file)) == wanted)
                .collect()
        };
        if !self.denied_paths.is_empty() {
            let denied = matching(&self.denied_set, true);
            checks.push(check(
                format!("denied_paths {}", quoted_list(&self.denied_paths)),
                denied.is_empty(),
                if denied.is_empty() {
                    "no planned path matches".into()
                } else {
                    format!("{} match", quoted_list(&denied))
                },
            ));
        }
        if !self.allowed_paths.is_empty() {
            let denied = matching(&self.denied_set, true);
            let outside: Vec<&str> = matching(&self.allowed_set, false)
                .into_iter()
                .filter(|file| !denied.contains(file))
                .collect();
            checks.push(check(
                format!("allowed_paths {}", quoted_list(&self.allowed_paths)),
                outside.is_empty(),
                if outside.is_empty() {
                    "every planned path matches".into()
                } else {
                    format!("{} match none", quoted_list(&outside))
                },
            ));
        }
        checks
    }

    /// Checks a teammate's merge (worktree isolation) by the path rules over the files it
    /// changes: `max_files`, `denied_paths`, `allowed_paths` (`required_sections` is a plan's
    /// rule, not a merge's).
    pub fn review_merge<S: AsRef<str>>(&self, files: &[S]) -> PlanVerdict {
        let reasons = if self.approve_all {
            Vec::new()
        } else {
            self.path_reasons("the merge changes", files)
        };
        PlanVerdict {
            approved: reasons.is_empty(),
            reasons,
            granted_mode: self.max_mode,
        }
    }

    /// Why a merge is refused for its tests: the policy requires a pass (`require_tests_pass`)
    /// and the merge was not tested (`approve_all` does not lift it).
    pub fn untested_merge_reason(&self, tested: bool) -> Option<String> {
        (self.require_tests_pass && !tested).then(|| {
            "the policy requires the merged result to pass the project's tests \
             (require_tests_pass), and this merge was not tested: set `[merge] test` in the \
             team file of a trusted project"
                .to_owned()
        })
    }

    /// Why `files` break the path rules (`listed` says where the count comes from).
    fn path_reasons<S: AsRef<str>>(&self, listed: &str, files: &[S]) -> Vec<String> {
        let mut reasons = Vec::new();
        if let Some(max) = self.max_files.filter(|max| files.len() as u64 > *max) {
            reasons.push(format!(
                "{listed} {} paths; the policy allows at most {max}",
                files.len()
            ));
        }
        for file in files.iter().map(AsRef::as_ref) {
            if self
                .denied_set
                .as_ref()
                .is_some_and(|set| set.is_match(file))
            {
                reasons.push(format!("`{file}` matches a denied path"));
            } else if self
                .allowed_set
                .as_ref()
                .is_some_and(|set| !set.is_match(file))
            {
                reasons.push(format!("`{file}` matches no allowed path"));
            }
        }
        reasons
    }

    /// Where the policy file is, as a path.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(&self.source)
    }
}

fn located_error<T>(source: &SourceText<'_>, located: &Located<T>, message: String) -> Diagnostic {
    Diagnostic::new(message)
        .in_source(source.label.clone())
        .at(Some(located.position))
        .for_key(located.key.clone())
}

fn check_section(
    source: &SourceText<'_>,
    section: Located<String>,
    errors: &mut Vec<Diagnostic>,
) -> Option<String> {
    let name = section.value.trim_start_matches('#').trim();
    if PLAN_SECTIONS.contains(&name) {
        return Some(name.to_string());
    }
    let message = format!(
        "expected one of {}, found {:?}{}",
        PLAN_SECTIONS.join(", "),
        section.value,
        suggestion_suffix(name, PLAN_SECTIONS.iter().copied())
    );
    errors.push(located_error(source, &section, message));
    None
}

fn glob_set(
    source: &SourceText<'_>,
    globs: &[Located<String>],
    errors: &mut Vec<Diagnostic>,
) -> Option<GlobSet> {
    if globs.is_empty() {
        return None;
    }
    let mut builder = GlobSetBuilder::new();
    for glob in globs {
        match Glob::new(glob.value.trim_start_matches("./")) {
            Ok(compiled) => {
                builder.add(compiled);
            }
            Err(error) => errors.push(located_error(
                source,
                glob,
                format!("invalid path glob {:?}: {}", glob.value, error.kind()),
            )),
        }
    }
    builder.build().ok()
}

fn quoted_list<S: AsRef<str>>(items: &[S]) -> String {
    items
        .iter()
        .map(|item| format!("`{}`", item.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `(name, body)` of each `## name` section.
fn plan_sections(plan: &str) -> Vec<(String, String)> {
    let mut sections: Vec<(String, String)> = Vec::new();
    for line in plan.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            sections.push((heading.trim().to_string(), String::new()));
        } else if let Some((_, body)) = sections.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    sections
}

/// The paths in `## Files`: one per line, list markers and backticks removed.
fn planned_files(sections: &[(String, String)]) -> Vec<String> {
    sections
        .iter()
        .filter(|(name, _)| name == "Files")
        .flat_map(|(_, body)| body.lines())
        .map(|line| {
            line.trim()
                .trim_start_matches(['-', '*', '+'])
                .trim()
                .trim_matches('`')
                .trim()
                .trim_start_matches("./")
                .to_string()
        })
        .filter(|line| !line.is_empty())
        .collect()
}
