//! The team's side of worktree merges: a teammate's end of turn asks for its merge, a
//! decision (the lead's `ReviewMerge`, `muster approve`, a policy) gets it applied, a merge a
//! person must decide stops a finished run with exit 5, and a completed run's result is
//! delivered to the user's tree. The git and record side is [`super::isolation`].

use muster_agents::runtime::team::TurnEnd;
use muster_agents::runtime::{EventSink, RunEvent};
use muster_mailbox::{Message, MessageBody, RequestRecord, RunStatus};
use muster_protocol::{DecisionSubject, MessageKind};
use serde_json::{Value, json};

use super::isolation::Delivered;
use super::{LEAD, Team};
use crate::exit::Exit;
use crate::lifecycle::Ending;

impl Team {
    /// Adds a teammate's merge step to its end of turn: its checkpoint, and the conflict
    /// hand-over or the `merge_request` (after its verification report, which `end.sends`
    /// already holds).
    pub(crate) async fn add_merge_step(
        &self,
        id: &str,
        turn: u64,
        end: &mut TurnEnd,
    ) -> anyhow::Result<()> {
        let Some(isolation) = &self.isolation else {
            return Ok(());
        };
        let verification = end.sends.iter().find_map(|send| match &send.body {
            MessageBody::VerificationReport { report, .. } => {
                report["summary"].as_str().map(str::to_owned)
            }
            _ => None,
        });
        let responder = self.responder_of(id);
        let step = isolation
            .merge_step(
                self.store.as_ref(),
                self.run_id(),
                id,
                &responder,
                turn,
                verification,
            )
            .await?;
        end.checkpoint = step.checkpoint;
        end.sends.extend(step.sends);
        Ok(())
    }

    /// Who decides `id`'s merges: its approver, but the lead for a teammate whose plans a
    /// plan reviewer hook decides (it reviews plans only).
    fn responder_of(&self, id: &str) -> String {
        let members = self.members.lock().unwrap_or_else(|p| p.into_inner());
        members.get(id).map_or_else(
            || LEAD.to_owned(),
            |m| muster_config::Responder::for_other_requests(&m.responder).to_owned(),
        )
    }

    /// A merge decision was committed (in this process, or seen arriving from another):
    /// approved merges are applied in the background.
    pub(crate) fn merge_decided(&self) {
        // A teammate's process on a worker never applies merges: the lead's process does.
        if self.isolation.is_none() || self.worker.is_some() {
            return;
        }
        if let Some(team) = self.me.upgrade() {
            tokio::spawn(async move {
                if let Err(error) = team.apply_merges().await {
                    tracing::warn!(%error, "applying approved merges");
                }
            });
        }
    }

    /// Applies every approved merge not yet applied and reports decisions and merges; wakes
    /// whoever watches the team (the lead's end-of-run check) when anything happened.
    pub(crate) async fn apply_merges(&self) -> anyhow::Result<()> {
        let Some(isolation) = &self.isolation else {
            return Ok(());
        };
        let pass = isolation
            .apply_approved(self.store.as_ref(), self.run_id())
            .await?;
        for request in &pass.decided {
            self.report_merge_decision(request);
        }
        for applied in &pass.applied {
            self.printer.emit(applied.event());
        }
        if !(pass.decided.is_empty() && pass.applied.is_empty() && pass.stale.is_empty()) {
            self.states.send_modify(|n| *n += 1);
        }
        Ok(())
    }

    fn report_merge_decision(&self, request: &RequestRecord) {
        let Some(response) = &request.response else {
            return;
        };
        self.printer.emit(RunEvent::ApprovalDecided {
            agent: request.requester.clone(),
            request_id: request.request_id.clone(),
            responder: response.responder.clone(),
            approved: response.body.approved().unwrap_or(false),
            subject: DecisionSubject::Merge {
                feedback: response.body.feedback().map(str::to_owned),
                rule: response.body.rule().map(str::to_owned),
            },
        });
    }

    /// Approved merge responses an idle teammate received: acked without waking it (the
    /// merge is muster's to apply); what is left wakes it (a rejection carries feedback).
    pub(crate) async fn settle_approved_merges(
        &self,
        mail: Vec<Message>,
    ) -> anyhow::Result<Vec<Message>> {
        let (approved, rest): (Vec<Message>, Vec<Message>) = mail.into_iter().partition(|m| {
            matches!(
                m.body.clone(),
                MessageBody::MergeResponse { approved: true, .. }
            )
        });
        if !approved.is_empty() {
            let keys = approved.iter().map(|m| m.key.clone()).collect();
            self.store.ack(self.run_id(), keys).await?;
            self.merge_decided();
        }
        if rest.iter().any(|m| m.kind == MessageKind::MergeResponse) {
            self.merge_decided();
        }
        Ok(rest)
    }

    /// At the end of a run: a merge nobody can decide any more. A person's stops the run
    /// with exit 5 (`muster approve`, then `muster resume`); one the lead saw and left
    /// undecided fails it, as a plan left undecided does.
    pub(crate) async fn ending_if_merges_wait(
        &self,
        lead_result: &str,
    ) -> anyhow::Result<Option<Ending>> {
        if self.isolation.is_none() {
            return Ok(None);
        }
        self.apply_merges().await?;
        let pending: Vec<RequestRecord> = self
            .store
            .requests(self.run_id())
            .await?
            .into_iter()
            .filter(|r| r.kind == MessageKind::MergeRequest && r.response.is_none())
            .collect();
        let human: Vec<&str> = pending
            .iter()
            .filter(|r| r.responder == muster_mailbox::HUMAN)
            .map(|r| r.request_id.as_str())
            .collect();
        if !human.is_empty() {
            return Ok(Some(Ending {
                status: RunStatus::AwaitingDecision,
                exit: Exit::AwaitingDecision,
                result: json!({"result": lead_result, "waiting_on": human}),
                text: format!(
                    "{lead_result}\nThe team's work waits for a person to decide the merge of \
                     {}: `muster inbox human` shows it; `muster approve ID` or `muster reject \
                     ID --feedback …`, then `muster resume`.",
                    human.join(", ")
                ),
            }));
        }
        let mut left_by_lead = Vec::new();
        for request in pending.iter().filter(|r| r.responder == LEAD) {
            if !self.delivered(request).await? {
                // It reaches the lead at its next boundary.
                return Ok(None);
            }
            left_by_lead.push(request.request_id.as_str());
        }
        if pending.len() > left_by_lead.len() {
            // A policy's decision is on its way.
            return Ok(None);
        }
        if left_by_lead.is_empty() {
            return Ok(None);
        }
        Ok(Some(Ending {
            status: RunStatus::Failed,
            exit: Exit::Failed,
            result: json!({"result": lead_result, "undecided": left_by_lead}),
            text: format!(
                "{lead_result}\nThe lead ended its turn without deciding the merge of {} \
                 (ReviewMerge); that work is not on the integration branch.",
                left_by_lead.join(", ")
            ),
        }))
    }

    /// A completed run's result: the integration head applied to the user's tree, or left on
    /// the integration branch when the tree changed during the run; the worktrees are
    /// removed (the branches stay until `muster prune`). A failed run, or one its budget
    /// ended, names the branch holding what was merged.
    pub(crate) async fn deliver_result(&self, ending: &mut Ending) -> anyhow::Result<()> {
        let Some(isolation) = &self.isolation else {
            return Ok(());
        };
        if matches!(ending.status, RunStatus::Failed | RunStatus::Budget) {
            // The run is over without applying anything: say where the merged work is.
            let head = isolation.head().await;
            if head != isolation.base().commit {
                let branch = isolation.worktrees.lead_branch();
                if let Value::Object(result) = &mut ending.result {
                    result.insert("result_branch".into(), json!(branch));
                    result.insert("result_commit".into(), json!(head));
                }
                ending.text.push_str(&format!(
                    "\nThe work merged so far is on branch {branch} ({head}); nothing was \
                     applied to your working tree."
                ));
            }
            return Ok(());
        }
        if ending.status != RunStatus::Completed {
            return Ok(());
        }
        let delivered = isolation
            .deliver(self.store.as_ref(), self.run_id())
            .await?;
        let (fields, words) = match &delivered {
            Delivered::Nothing => (json!({}), None),
            Delivered::Applied { commit, files } => (
                json!({"applied": commit, "files_changed": files}),
                Some(format!(
                    "The team's changes ({files} files) are in your working tree, uncommitted \
                     (integration commit {commit})."
                )),
            ),
            Delivered::GateFailed {
                branch,
                commit,
                gate,
            } => {
                // The team's result fails the project's tests: not applied, and the run
                // failed (a script or CI sees it by the exit code).
                ending.status = RunStatus::Failed;
                ending.exit = crate::exit::Exit::Failed;
                let exit = gate
                    .exit
                    .map_or_else(|| "no exit code".to_owned(), |code| format!("exit {code}"));
                (
                    json!({"result_branch": branch, "result_commit": commit,
                           "final_gate": gate,
                           "reason": format!("the team's result fails the project's tests \
                                              ({}: {exit}); nothing was applied", gate.command)}),
                    Some(format!(
                        "The team's result fails the project's tests (`{}`: {exit}), so it was \
                         not applied; it stays on branch {branch} ({commit}). The end of the \
                         output:\n{}",
                        gate.command, gate.tail
                    )),
                )
            }
            Delivered::OnBranch { branch, commit } => (
                json!({"result_branch": branch, "result_commit": commit}),
                Some(format!(
                    "Your working tree changed during the run, so the team's result stays on \
                     branch {branch} ({commit}): `git merge {branch}` or `git diff HEAD \
                     {branch}` to take it."
                )),
            ),
        };
        if let (Value::Object(result), Value::Object(fields)) = (&mut ending.result, fields) {
            result.extend(fields);
        }
        if let Some(words) = words {
            ending.text.push_str(&format!("\n{words}"));
        }
        if let Err(error) = isolation.worktrees.remove_worktrees().await {
            tracing::warn!(%error, "the run's worktrees were not removed");
        }
        Ok(())
    }

    /// The teammate's verification root: its worktree under isolation.
    pub(crate) fn workspace_root_of(&self, id: &str) -> std::path::PathBuf {
        match &self.isolation {
            Some(isolation) => isolation.worktrees.workspace_of(id),
            None => self.run.workspace.root().to_path_buf(),
        }
    }
}
