//! A plan reviewer hook (`planReviewers.NAME`, named by a team file's `approver =
//! "hook:NAME"`): one process that gets a teammate's plan and request on stdin, shaped as
//! Claude Code's `PermissionRequest` for `ExitPlanMode` (so a plan-review hook written for
//! Claude Code reads it unchanged), and answers in that event's output:
//! `hookSpecificOutput.decision.behavior` `allow` or `deny` with `message` as the feedback;
//! exit 2 or top-level `decision: "block"` rejects with the reason.
//!
//! A reviewer that gives no decision (it failed, timed out, printed nothing usable, or a file
//! it names changed since trust) rejects: an automatic answer never approves by default. Such
//! failures are told apart from rejections on the plan's merit ([`PlanReview::Failed`]): after
//! a few in a row the teammate's next plan goes to a person.

use std::path::Path;

use muster_config::PermissionMode;
use muster_config::hooks::{HookEvent, PlanReviewer, named_files_unchanged};
use serde_json::{Value, json};

use super::outcome::{HookPermission, interpret};
use super::process::{ProcessSpec, run_hook_process};
use super::{FiringAgent, HookRunner};
use crate::sandbox::SandboxProfile;

/// The plan and request a reviewer decides.
#[derive(Debug, Clone)]
pub struct PlanToReview<'a> {
    pub run_id: &'a str,
    pub request_id: &'a str,
    /// The teammate that asked, and its definition.
    pub teammate: &'a str,
    pub agent_type: &'a str,
    pub plan: &'a str,
    pub plan_file: &'a str,
    pub allowed_prompts: &'a [String],
    /// 1 for a first plan, then one more per resubmission.
    pub revision: u32,
    /// Where the reviewer runs (the project root; read-only).
    pub workspace: &'a Path,
}

/// What a reviewer decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanReview {
    Approved {
        feedback: Option<String>,
    },
    /// Rejected on the plan's merit (`deny`, exit 2, `decision: "block"`).
    Rejected {
        feedback: String,
    },
    /// The reviewer itself failed: it crashed, timed out, printed no decision, or a file it
    /// names changed since trust. The plan is rejected all the same (never approved by
    /// default), and these are counted toward handing the teammate's plans to a person.
    Failed {
        feedback: String,
    },
}

impl PlanReview {
    /// Reads a reviewer's ending (see the module's comment).
    pub fn read(name: &str, command: &str, end: &super::ProcessEnd) -> PlanReview {
        let verdict = interpret(
            HookEvent::PermissionRequest,
            command,
            muster_config::hooks::OnFailure::Continue,
            end,
        );
        if let Some(reason) = verdict.block {
            return PlanReview::Rejected { feedback: reason };
        }
        match verdict.permission {
            Some((HookPermission::Allow, message)) => PlanReview::Approved {
                feedback: (!message.trim().is_empty()).then_some(message),
            },
            Some((_, message)) if !message.trim().is_empty() => {
                PlanReview::Rejected { feedback: message }
            }
            Some(_) => PlanReview::Rejected {
                feedback: format!("rejected by plan reviewer `{name}`"),
            },
            None => {
                let why = match verdict.messages.first() {
                    Some(failure) => failure.clone(),
                    None => "it printed no `hookSpecificOutput.decision`".to_owned(),
                };
                PlanReview::Failed {
                    feedback: format!(
                        "plan reviewer `{name}` gave no decision ({why}); submit the plan again"
                    ),
                }
            }
        }
    }
}

impl HookRunner {
    /// Runs `reviewer` on `plan` in the read-only sandbox and reads its decision.
    pub async fn review_plan(
        &self,
        reviewer: &PlanReviewer,
        plan: &PlanToReview<'_>,
    ) -> PlanReview {
        let hook = reviewer.as_hook();
        let command = &reviewer.handler.command;
        if let Err(changed) = named_files_unchanged(&hook, plan.workspace) {
            return PlanReview::Failed {
                feedback: format!(
                    "plan reviewer `{}` did not run: {changed}; a person must run `muster \
                     trust` after checking it",
                    reviewer.name
                ),
            };
        }
        let stdin = review_input(plan).to_string();
        let spec = ProcessSpec {
            command,
            stdin: stdin.as_bytes(),
            workspace: plan.workspace,
            environment: &self.environment,
            timeout: reviewer.handler.timeout,
            sandbox: self
                .sandbox
                .as_deref()
                .map(|sandbox| (sandbox, SandboxProfile::ReadOnly)),
            hook_sandbox: reviewer.handler.sandbox,
            launcher: self.launcher.as_deref(),
        };
        let end = run_hook_process(&spec).await;
        tracing::debug!(reviewer = %reviewer.name, command, ?end, "plan reviewer ran");
        PlanReview::read(&reviewer.name, command, &end)
    }
}

/// The reviewer's stdin: Claude Code's `PermissionRequest` of `ExitPlanMode` by the teammate,
/// with the request's id, plan file and revision beside it.
pub fn review_input(plan: &PlanToReview<'_>) -> Value {
    let agent = FiringAgent {
        run_id: plan.run_id,
        agent_id: plan.teammate,
        is_lead: false,
        agent_type: plan.agent_type,
        teammate_name: Some(plan.teammate),
        workspace: plan.workspace,
        mode: PermissionMode::Plan,
        profile: SandboxProfile::ReadOnly,
        transcript_path: None,
        traceparent: None,
    };
    let fields = json!({
        "tool_name": muster_protocol::ToolName::ExitPlanMode.as_str(),
        "tool_input": {"plan": plan.plan, "allowedPrompts": plan.allowed_prompts},
        "permission_suggestions": [],
        "request_id": plan.request_id,
        "plan_file": plan.plan_file,
        "revision": plan.revision,
    });
    let Value::Object(fields) = fields else {
        return Value::Null;
    };
    HookRunner::input(HookEvent::PermissionRequest, &agent, fields)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::ProcessEnd;

    fn exited(code: i32, stdout: &str, stderr: &str) -> ProcessEnd {
        ProcessEnd::Exited {
            code: Some(code),
            stdout: stdout.into(),
            stderr: stderr.into(),
        }
    }

    #[test]
    fn a_reviewers_ending_approves_only_when_it_says_allow() {
        let allow = r#"{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow","message":"ok, mind the tests"}}}"#;
        let deny = r#"{"hookSpecificOutput":{"decision":{"behavior":"deny","message":"add a rollback step"}}}"#;
        let cases: [(ProcessEnd, PlanReview); 7] = [
            (
                exited(0, allow, ""),
                PlanReview::Approved {
                    feedback: Some("ok, mind the tests".into()),
                },
            ),
            (
                exited(0, deny, ""),
                PlanReview::Rejected {
                    feedback: "add a rollback step".into(),
                },
            ),
            (
                exited(2, "", "too vague\n"),
                PlanReview::Rejected {
                    feedback: "too vague".into(),
                },
            ),
            (
                exited(0, r#"{"decision":"block","reason":"no tests"}"#, ""),
                PlanReview::Rejected {
                    feedback: "no tests".into(),
                },
            ),
            (
                exited(0, "looks fine", ""),
                PlanReview::Failed {
                    feedback: "plan reviewer `r` gave no decision (it printed no \
                               `hookSpecificOutput.decision`); submit the plan again"
                        .into(),
                },
            ),
            (
                exited(1, "", "boom"),
                PlanReview::Failed {
                    feedback: "plan reviewer `r` gave no decision (hook `review` exited with 1: \
                               boom); submit the plan again"
                        .into(),
                },
            ),
            (
                ProcessEnd::TimedOut(std::time::Duration::from_secs(1)),
                PlanReview::Failed {
                    feedback: "plan reviewer `r` gave no decision (hook `review` timed out after \
                               1 s; its process group was killed); submit the plan again"
                        .into(),
                },
            ),
        ];
        for (end, expected) in cases {
            assert_eq!(PlanReview::read("r", "review", &end), expected, "{end:?}");
        }
    }

    #[test]
    fn the_input_is_claude_codes_permission_request_for_exit_plan_mode() {
        let prompts = vec!["run tests".to_owned()];
        let input = review_input(&PlanToReview {
            run_id: "run-1",
            request_id: "plan-dev-1",
            teammate: "dev",
            agent_type: "general-purpose",
            plan: "1. do it",
            plan_file: "plans/x.md",
            allowed_prompts: &prompts,
            revision: 2,
            workspace: Path::new("/p"),
        });
        assert_eq!(input["hook_event_name"], "PermissionRequest");
        assert_eq!(input["tool_name"], "ExitPlanMode");
        assert_eq!(input["tool_input"]["plan"], "1. do it");
        assert_eq!(input["tool_input"]["allowedPrompts"][0], "run tests");
        assert_eq!(input["agent_id"], "dev");
        assert_eq!(input["teammate_name"], "dev");
        assert_eq!(input["permission_mode"], "plan");
        assert_eq!(input["request_id"], "plan-dev-1");
        assert_eq!(input["revision"], 2);
        assert_eq!(input["session_id"], "run-1");
    }
}
