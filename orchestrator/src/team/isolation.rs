//! Worktree isolation in a team run (DESIGN.md "Wave 2 → Worktree isolation"): what is
//! recorded, when, and in which transaction. The git side is [`crate::worktree`].
//!
//! - The choice and the base are the first record of the lead's stream [`ISOLATION_STREAM`]
//!   (a resume keeps the choice the run made).
//! - Each agent's worktree state is a `checkpoint` record committed with the calls that
//!   produced it (the runtime asks [`TeamServices::checkpoint`]); a resume restores each
//!   worktree to its newest one, even if the directory was lost.
//! - The integration head is the newest `checkpoint` of the lead (a lead's own edits, or an
//!   applied merge, which names its request): it moves only under one lock, so the head a
//!   merge is made on is the head the store holds.
//! - A teammate that ends a turn with unmerged changes gets its merge checked; a conflict is
//!   handed back into its worktree, a clean merge becomes a `merge_request` to the lead's
//!   mailbox, decided by its plan responder; an approved merge is applied as its own
//!   transition (`merge_applied`).
//! - At the end of a completed run, the final decision (apply to the user's tree, or leave
//!   the result on the integration branch) is recorded before it is carried out, so a kill
//!   half-way finishes the same way.
//!
//! [`TeamServices::checkpoint`]: muster_agents::runtime::team::TeamServices::checkpoint

use muster_protocol::{RequestFamily, RequestId};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use muster_agents::runtime::Record;
use muster_agents::runtime::team::TeamCheckpoint;
use muster_config::Isolation;
use muster_mailbox::{
    CommitTurn, MailboxStore, MessageBody, MessageKind, NewMessage, NewRecord, RequestRecord,
};
use serde::{Deserialize, Serialize};

use crate::worktree::{self, Base, Checkpoint, Chosen, Git, Worktrees};

use super::LEAD;

/// The lead's record stream holding the run's isolation choice, base and final decision.
pub(crate) const ISOLATION_STREAM: &str = "isolation";
/// The stream of agents' transcripts (checkpoints live there).
const TRANSCRIPT: &str = muster_agents::runtime::TRANSCRIPT;

/// The approved merge requests of run `run_id` that were not applied: the integration branch
/// had moved and the merge then conflicted or failed the test gate, so the teammate was sent
/// back (`muster plans` says so rather than "merged").
pub(crate) async fn stale_merges(
    store: &dyn MailboxStore,
    run_id: &str,
) -> anyhow::Result<std::collections::BTreeSet<String>> {
    Ok(store
        .records(run_id, LEAD, ISOLATION_STREAM, 0)
        .await?
        .into_iter()
        .filter_map(|row| match serde_json::from_value(row.body) {
            Ok(IsolationRecord::MergeStale { request_id }) => Some(request_id),
            _ => None,
        })
        .collect())
}

/// One record of [`ISOLATION_STREAM`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum IsolationRecord {
    Shared,
    Base(Base),
    /// An approved merge that no longer applies (the head moved and it conflicts now).
    MergeStale {
        request_id: String,
    },
    /// What the end of the run does with the result.
    Final {
        apply: bool,
        commit: String,
        /// The gate's run on the result before the final apply (`[merge] before_apply`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        gate: Option<super::gate::GateResult>,
    },
    /// The final decision's apply to the user's tree is done (a resume does not write the
    /// tree again: the person may have changed it since).
    Applied {
        commit: String,
        files: usize,
    },
    /// The run was continued (`muster run --continue`), committed with the lead's new turn:
    /// what came before it was the previous stretch's (its `Final` is done with), and `base`,
    /// when set, is the fresh base every worktree starts from.
    Continued {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        base: Option<Base>,
    },
}

/// The run's git remote, when teammates run on workers (DESIGN, "Wave 2 → Workers"): files
/// travel through it, and only the run's own refs (`refs/heads/muster/<slug>/*`,
/// `refs/muster/<slug>/*`) are pushed there.
#[derive(Debug, Clone)]
pub(crate) struct RemoteGit {
    pub url: String,
    /// Which side this process is: the lead's (pushes the base and the integration head,
    /// fetches teammates' branches for merges) or a worker's (pushes its teammate's
    /// checkpoints, fetches the integration head).
    pub side: Side,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Lead,
    Worker,
}

impl RemoteGit {
    /// Pushes `commit` to `refs/heads/muster/<slug>/<agent>` (forced: a restored worktree
    /// may move a branch back to its recorded checkpoint).
    async fn push_branch(
        &self,
        git: &Git,
        worktrees: &Worktrees,
        agent: &str,
        commit: &str,
    ) -> anyhow::Result<()> {
        let refspec = format!("+{commit}:refs/heads/{}", worktrees.branch(agent));
        git.run(&["push", "--quiet", &self.url, &refspec])
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot push {} to {}: {e}",
                    worktrees.branch(agent),
                    self.url
                )
            })?;
        Ok(())
    }

    /// Fetches every ref of the run from the remote: branches as remote-tracking refs
    /// (`refs/remotes/muster/<slug>/*`, never checked out, so a fetch never meets a
    /// worktree), the base as it is named there.
    pub(crate) async fn fetch_run(&self, git: &Git, slug: &str) -> anyhow::Result<()> {
        let branches = format!("+refs/heads/muster/{slug}/*:refs/remotes/muster/{slug}/*");
        let others = format!("+refs/muster/{slug}/*:refs/muster/{slug}/*");
        git.run(&["fetch", "--quiet", &self.url, &branches, &others])
            .await
            .map_err(|e| {
                anyhow::anyhow!("cannot fetch run {slug}'s refs from {}: {e}", self.url)
            })?;
        Ok(())
    }
}

/// A team run's worktrees and what it recorded of them.
pub(crate) struct TeamIsolation {
    pub worktrees: Worktrees,
    /// The recorded base (a continuation may take a fresh one).
    base: Mutex<Base>,
    /// The integration head as recorded, behind the lock every move of it takes.
    head: Arc<tokio::sync::Mutex<String>>,
    /// The newest checkpoint recorded per agent whose worktree this process made or
    /// restored.
    recorded: Mutex<BTreeMap<String, Checkpoint>>,
    /// Merge requests applied or found stale.
    settled: Mutex<BTreeSet<String>>,
    /// Merge decisions already reported (those made before this process started, and those
    /// it reported since).
    announced: Mutex<BTreeSet<String>>,
    /// The run's remote, when teammates run on workers.
    remote: Option<RemoteGit>,
    /// The test gate of merges (`[merge] test`, trusted projects only).
    gate: Option<super::gate::MergeTestGate>,
}

/// What one pass over the merge requests found and did.
#[derive(Debug, Default)]
pub(crate) struct MergePass {
    /// Decided merge requests not reported before.
    pub decided: Vec<RequestRecord>,
    pub applied: Vec<Applied>,
    /// Approved merges that conflict with the moved head (their teammates were told).
    pub stale: Vec<String>,
}

/// What a teammate's end of turn adds for its merge.
#[derive(Debug, Default)]
pub(crate) struct MergeStep {
    pub checkpoint: Option<TeamCheckpoint>,
    pub sends: Vec<NewMessage>,
}

/// What the end of a run did with the result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Delivered {
    /// Nothing was merged.
    Nothing,
    /// Applied to the user's working tree as uncommitted changes.
    Applied { commit: String, files: usize },
    /// Left on the integration branch (the user's tree changed during the run).
    OnBranch { branch: String, commit: String },
    /// Left on the integration branch: the result failed the project's tests
    /// (`[merge] before_apply`).
    GateFailed {
        branch: String,
        commit: String,
        gate: super::gate::GateResult,
    },
}

impl TeamIsolation {
    /// The run's isolation: the recorded choice on a resume, else chosen now (and recorded,
    /// with the base). `None`: shared (with a warning printed when the user did not ask).
    pub(crate) async fn set_up(
        store: &dyn MailboxStore,
        run_id: &str,
        slug: &str,
        requested: Option<Isolation>,
        workspace: &Path,
        muster_dir: &Path,
    ) -> anyhow::Result<Option<TeamIsolation>> {
        let recorded = store
            .records(run_id, LEAD, ISOLATION_STREAM, 0)
            .await?
            .into_iter()
            .filter_map(|row| serde_json::from_value::<IsolationRecord>(row.body).ok())
            .collect::<Vec<_>>();
        let (worktrees, first_base) = match recorded.first() {
            Some(IsolationRecord::Shared) => return Ok(None),
            Some(IsolationRecord::Base(base)) => {
                let chosen =
                    worktree::choose(Some(Isolation::Worktree), workspace, muster_dir, slug)
                        .await?;
                let Chosen::Worktrees(worktrees) = chosen else {
                    anyhow::bail!("the run uses worktrees, and they cannot be set up here");
                };
                (worktrees, base.clone())
            }
            _ => match worktree::choose(requested, workspace, muster_dir, slug).await? {
                Chosen::Shared { warning } => {
                    if let Some(warning) = warning {
                        eprintln!("warning: {warning}");
                    }
                    append(store, run_id, &IsolationRecord::Shared).await?;
                    return Ok(None);
                }
                Chosen::Worktrees(worktrees) => {
                    worktrees.refuse_taken().await?;
                    let base = worktrees.make_base().await?;
                    append(store, run_id, &IsolationRecord::Base(base.clone())).await?;
                    (worktrees, base)
                }
            },
        };
        // A continuation's fresh base replaces the one before it.
        let base = recorded
            .iter()
            .rev()
            .find_map(|record| match record {
                IsolationRecord::Continued { base: Some(base) } => Some(base.clone()),
                _ => None,
            })
            .unwrap_or(first_base);
        let mut settled = BTreeSet::new();
        let mut head = base.commit.clone();
        for row in store.records(run_id, LEAD, TRANSCRIPT, 0).await? {
            if let Ok(Record::Checkpoint { commit, merge, .. }) = Record::from_stored(&row) {
                head = commit;
                settled.extend(merge);
            }
        }
        for record in recorded {
            if let IsolationRecord::MergeStale { request_id } = record {
                settled.insert(request_id);
            }
        }
        let announced = store
            .requests(run_id)
            .await?
            .into_iter()
            .filter(|r| r.kind == MessageKind::MergeRequest && r.response.is_some())
            .map(|r| r.request_id)
            .collect();
        Ok(Some(TeamIsolation {
            worktrees,
            base: Mutex::new(base),
            head: Arc::new(tokio::sync::Mutex::new(head)),
            recorded: Mutex::new(BTreeMap::new()),
            settled: Mutex::new(settled),
            announced: Mutex::new(announced),
            remote: None,
            gate: None,
        }))
    }

    /// Every merge must pass `gate` from now on.
    pub(crate) fn with_gate(mut self, gate: Option<super::gate::MergeTestGate>) -> TeamIsolation {
        self.gate = gate;
        self
    }

    /// Files travel through `remote` from now on. On the lead's side the base and the
    /// recorded integration head are pushed at once (a worker starts a teammate from them).
    pub(crate) async fn with_remote(mut self, remote: RemoteGit) -> anyhow::Result<TeamIsolation> {
        if remote.side == Side::Lead {
            let git = Git::new(self.worktrees.toplevel());
            let base_ref = format!("refs/muster/{}/base", self.slug());
            let refspec = format!("+{}:{base_ref}", self.base().commit);
            git.run(&["push", "--quiet", &remote.url, &refspec])
                .await
                .map_err(|e| {
                    anyhow::anyhow!("cannot push the run's base to {}: {e}", remote.url)
                })?;
            let head = self.head().await;
            remote
                .push_branch(&git, &self.worktrees, LEAD, &head)
                .await?;
        }
        self.remote = Some(remote);
        Ok(self)
    }

    fn slug(&self) -> String {
        self.worktrees
            .lead_branch()
            .trim_start_matches("muster/")
            .trim_end_matches("/lead")
            .to_owned()
    }

    /// A worker's side: the integration head as the store records it now (the lead's
    /// newest checkpoint, else the base), fetched from the remote (the lead pushed it
    /// before recording it).
    async fn refresh_head(&self, store: &dyn MailboxStore, run_id: &str) -> anyhow::Result<()> {
        let Some(remote) = self.remote.as_ref().filter(|r| r.side == Side::Worker) else {
            return Ok(());
        };
        let mut newest = self.base().commit;
        for row in store.records(run_id, LEAD, TRANSCRIPT, 0).await? {
            if let Ok(Record::Checkpoint { commit, .. }) = Record::from_stored(&row) {
                newest = commit;
            }
        }
        let git = Git::new(self.worktrees.toplevel());
        remote.fetch_run(&git, &self.slug()).await?;
        *self.head.lock().await = newest;
        Ok(())
    }

    /// The recorded base.
    pub(crate) fn base(&self) -> Base {
        self.base.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The recorded integration head.
    pub(crate) async fn head(&self) -> String {
        self.head.lock().await.clone()
    }

    /// Agent `agent`'s workspace: its worktree made (at the integration head), or restored
    /// once per process to its newest checkpoint in the store.
    pub(crate) async fn workspace_for(
        &self,
        store: &dyn MailboxStore,
        run_id: &str,
        agent: &str,
    ) -> anyhow::Result<PathBuf> {
        if self.recorded_of(agent).is_some() {
            return Ok(self.worktrees.workspace_of(agent));
        }
        let checkpoint = if agent == LEAD {
            Some(Checkpoint {
                commit: self.head().await,
                merging: None,
            })
        } else {
            newest_checkpoint(store, run_id, agent).await?
        };
        let checkpoint = match checkpoint {
            Some(checkpoint) => {
                self.worktrees.restore(agent, &checkpoint).await?;
                checkpoint
            }
            None => {
                let head = self.head().await;
                self.worktrees.ensure(agent, &head).await?;
                muster_mailbox::failpoint!("worktree_made");
                // Nothing recorded yet: the first checkpoint records the starting point.
                Checkpoint {
                    commit: String::new(),
                    merging: None,
                }
            }
        };
        self.set_recorded(agent, checkpoint);
        Ok(self.worktrees.workspace_of(agent))
    }

    fn recorded_of(&self, agent: &str) -> Option<Checkpoint> {
        let recorded = self.recorded.lock().unwrap_or_else(|p| p.into_inner());
        recorded.get(agent).cloned()
    }

    fn set_recorded(&self, agent: &str, checkpoint: Checkpoint) {
        let mut recorded = self.recorded.lock().unwrap_or_else(|p| p.into_inner());
        recorded.insert(agent.to_owned(), checkpoint);
    }

    /// Agent `agent`'s worktree as a checkpoint to commit with its turn, or `None` when
    /// nothing changed since the one recorded. The lead's moves the integration head, under
    /// its lock, held until the turn's commit lands.
    pub(crate) async fn checkpoint(&self, agent: &str) -> anyhow::Result<Option<TeamCheckpoint>> {
        if agent == LEAD {
            let mut head = self.head.clone().lock_owned().await;
            let Some(commit) = self.worktrees.lead_checkpoint(&head).await? else {
                return Ok(None);
            };
            self.publish(LEAD, &commit).await?;
            *head = commit.clone();
            return Ok(Some(TeamCheckpoint {
                commit,
                merging: None,
                hold: Some(Arc::new(head)),
            }));
        }
        let checkpoint = self.worktrees.checkpoint(agent).await?;
        if self.recorded_of(agent).as_ref() == Some(&checkpoint) {
            return Ok(None);
        }
        // Pushed before the turn that records it commits: a worker taking the teammate over
        // always finds the recorded commit on the remote.
        if self.remote.as_ref().is_some_and(|r| r.side == Side::Worker) {
            self.publish(agent, &checkpoint.commit).await?;
        }
        // The commit exists on the branch; the turn that records it has not landed.
        muster_mailbox::failpoint!("checkpoint");
        self.set_recorded(agent, checkpoint.clone());
        Ok(Some(TeamCheckpoint {
            commit: checkpoint.commit,
            merging: None,
            hold: None,
        }))
    }

    /// A teammate's end of turn: its unmerged changes checked against the integration head.
    /// A conflict is merged into its worktree with markers for it to resolve (and said so in
    /// a mail); a clean merge becomes a `merge_request` to the lead, decided by `responder`.
    pub(crate) async fn merge_step(
        &self,
        store: &dyn MailboxStore,
        run_id: &str,
        agent: &str,
        responder: &str,
        turn: u64,
        verification: Option<String>,
    ) -> anyhow::Result<MergeStep> {
        self.refresh_head(store, run_id).await?;
        let mut step = MergeStep {
            checkpoint: self.checkpoint(agent).await?,
            ..MergeStep::default()
        };
        let Some(current) = self.recorded_of(agent) else {
            return Ok(step);
        };
        let head = self.head().await;
        if current.commit.is_empty() || self.worktrees.contains(&head, &current.commit).await? {
            return Ok(step);
        }
        let requests: Vec<RequestRecord> = store
            .requests(run_id)
            .await?
            .into_iter()
            .filter(|r| r.kind == MessageKind::MergeRequest && r.requester == agent)
            .collect();
        if requests.iter().any(|r| r.response.is_none()) {
            return Ok(step);
        }
        let rejected_before = requests
            .iter()
            .any(|r| merge_commit(r) == Some(current.commit.as_str()) && !approved(r));
        if rejected_before {
            // The lead sent it back: only new work asks again.
            return Ok(step);
        }
        let key = |what: &str| Some(format!("{agent}:{what}:{turn}"));
        let changes = self.worktrees.changes(&head, &current.commit).await?;
        if changes.conflict_markers > 0 {
            step.sends.push(notice(
                run_id,
                agent,
                format!(
                    "Your branch still has conflict markers (<<<<<<< / >>>>>>>) in what it \
                     changes ({}): resolve them in your worktree, then end your turn to ask \
                     for the merge again.",
                    changes.files.join(", ")
                ),
                key("merge-markers"),
            ));
            return Ok(step);
        }
        if !changes.conflicts.is_empty() {
            let path = self.worktrees.path_of(agent);
            let files = self.worktrees.start_merge(&path, &head).await?;
            let handed = Checkpoint {
                commit: current.commit.clone(),
                merging: Some(head.clone()),
            };
            self.set_recorded(agent, handed.clone());
            step.checkpoint = Some(TeamCheckpoint {
                commit: handed.commit,
                merging: handed.merging,
                hold: None,
            });
            step.sends.push(notice(
                run_id,
                agent,
                format!(
                    "Your changes conflict with the integration branch ({}), which moved \
                     while you worked. muster merged it into your worktree and left conflict \
                     markers in: {}. Resolve each file (keep both sides' intent), run the \
                     tests, then end your turn: muster asks for the merge again.",
                    self.worktrees.lead_branch(),
                    if files.is_empty() {
                        changes.conflicts.join(", ")
                    } else {
                        files.join(", ")
                    }
                ),
                key("merge-conflict"),
            ));
            return Ok(step);
        }
        let tested = match &self.gate {
            None => None,
            Some(gate) => {
                let result = self.gate_merge(gate, &head, &current.commit, agent).await?;
                if !result.passed {
                    let text = gate_failure_text(&result, &changes.files, None);
                    step.sends
                        .push(notice(run_id, agent, text, key("merge-gate")));
                    return Ok(step);
                }
                Some(serde_json::to_value(&result)?)
            }
        };
        let responder = merge_responder(responder, &changes.files);
        let number = store
            .counter_for(
                run_id,
                &RequestFamily::Merge.counter_name(agent),
                &format!("{agent}:merge:{turn}"),
            )
            .await?;
        step.sends.push(NewMessage {
            run_id: run_id.to_owned(),
            sender: agent.to_owned(),
            recipient: LEAD.into(),
            body: MessageBody::MergeRequest {
                request_id: RequestId::new(RequestFamily::Merge, agent, number).to_string(),
                agent: agent.to_owned(),
                branch: self.worktrees.branch(agent),
                commit: current.commit,
                onto: head,
                files: changes.files,
                diffstat: changes.diffstat,
                verification,
                responder,
                tested,
            },
            idempotency_key: key("merge"),
        });
        Ok(step)
    }

    /// Applies every approved merge not yet applied, one at a time under the head's lock:
    /// the merge commit on the recorded head, the integration worktree moved to it, and the
    /// lead's `checkpoint` naming the request committed. A merge that conflicts now (the head
    /// moved) is recorded stale and its teammate told. Gives back what it found and did.
    pub(crate) async fn apply_approved(
        &self,
        store: &dyn MailboxStore,
        run_id: &str,
    ) -> anyhow::Result<MergePass> {
        let mut head = self.head.lock().await;
        let mut pass = MergePass::default();
        for request in store.requests(run_id).await? {
            if request.kind != MessageKind::MergeRequest || request.response.is_none() {
                continue;
            }
            if self.announce(&request.request_id) {
                pass.decided.push(request.clone());
            }
            if !approved(&request) || self.settled(&request) {
                continue;
            }
            let Some(commit) = merge_commit(&request) else {
                continue;
            };
            self.fetch_teammate(&request.requester).await?;
            let check = self.worktrees.merge_check(&head, commit).await?;
            if !check.conflicts.is_empty() {
                let text = format!(
                    "{} was approved, but the integration branch moved meanwhile and your \
                     branch now conflicts with it in: {}. End your turn: muster hands you the \
                     conflicts to resolve in your worktree, then asks for the merge again.",
                    request.request_id,
                    check.conflicts.join(", ")
                );
                self.record_stale(store, run_id, &request, text).await?;
                pass.stale.push(request.request_id.clone());
                continue;
            }
            // The merge queue: merges apply one at a time under the head's lock, and one
            // tested on another head is tested again on this one first.
            if let Some(gate) = &self.gate
                && tested_head(&request) != Some(head.as_str())
            {
                let scratch = format!("{}-apply", request.requester);
                let result = self.gate_merge(gate, &head, commit, &scratch).await?;
                if !result.passed {
                    let files = match &request.body {
                        MessageBody::MergeRequest { files, .. } => files.clone(),
                        _ => Vec::new(),
                    };
                    let text = gate_failure_text(&result, &files, Some(&request.request_id));
                    self.record_stale(store, run_id, &request, text).await?;
                    pass.stale.push(request.request_id.clone());
                    continue;
                }
            }
            let message = format!(
                "muster: merge {} ({})",
                self.worktrees.branch(&request.requester),
                request.request_id
            );
            let merged = self
                .worktrees
                .merge_commit(&head, commit, &check.tree, &message)
                .await?;
            if let Err(error) = self.worktrees.advance_lead(&merged).await {
                // The lead's own uncommitted edits are in the way: the merge waits for its
                // next checkpoint (nothing was recorded, so nothing is half done).
                tracing::warn!(%error, request = %request.request_id, "merge waits");
                continue;
            }
            self.publish(LEAD, &merged).await?;
            muster_mailbox::failpoint!("merge_apply");
            let record = Record::Checkpoint {
                commit: merged.clone(),
                merging: None,
                merge: Some(request.request_id.clone()),
            }
            .to_new(LEAD)?;
            store
                .commit_turn(CommitTurn {
                    run_id: run_id.to_owned(),
                    agent: LEAD.into(),
                    records: vec![record],
                    ..CommitTurn::default()
                })
                .await?;
            *head = merged.clone();
            self.settle(&request.request_id);
            pass.applied.push(Applied {
                request_id: request.request_id.clone(),
                agent: request.requester.clone(),
                commit: merged,
                files: match &request.body {
                    MessageBody::MergeRequest { files, .. } => files.len(),
                    _ => 0,
                },
            });
        }
        Ok(pass)
    }

    /// Runs the gate on `commit` merged onto `head`, in the scratch tree `scratch`.
    async fn gate_merge(
        &self,
        gate: &super::gate::MergeTestGate,
        head: &str,
        commit: &str,
        scratch: &str,
    ) -> anyhow::Result<super::gate::GateResult> {
        let check = self.worktrees.merge_check(head, commit).await?;
        let merged = self
            .worktrees
            .merge_commit(head, commit, &check.tree, "muster: the merge gate's result")
            .await?;
        gate.run(&self.worktrees, head, &merged, scratch).await
    }

    /// Pushes `commit` as `agent`'s branch to the run's remote, when there is one.
    async fn publish(&self, agent: &str, commit: &str) -> anyhow::Result<()> {
        let Some(remote) = &self.remote else {
            return Ok(());
        };
        let git = Git::new(self.worktrees.toplevel());
        remote
            .push_branch(&git, &self.worktrees, agent, commit)
            .await
    }

    /// The lead's side, before checking or applying a teammate's merge: the teammate's
    /// branch fetched from the remote when it works elsewhere (no worktree of it here).
    async fn fetch_teammate(&self, agent: &str) -> anyhow::Result<()> {
        let Some(remote) = self.remote.as_ref().filter(|r| r.side == Side::Lead) else {
            return Ok(());
        };
        if self.worktrees.path_of(agent).exists() {
            return Ok(());
        }
        let branch = self.worktrees.branch(agent);
        let refspec = format!("+refs/heads/{branch}:refs/heads/{branch}");
        Git::new(self.worktrees.toplevel())
            .run(&["fetch", "--quiet", &remote.url, &refspec])
            .await
            .map_err(|e| anyhow::anyhow!("cannot fetch {branch} from {}: {e}", remote.url))?;
        Ok(())
    }

    /// Whether `request_id`'s decision is reported now (the first time).
    fn announce(&self, request_id: &str) -> bool {
        let mut announced = self.announced.lock().unwrap_or_else(|p| p.into_inner());
        announced.insert(request_id.to_owned())
    }

    fn settled(&self, request: &RequestRecord) -> bool {
        let settled = self.settled.lock().unwrap_or_else(|p| p.into_inner());
        settled.contains(&request.request_id)
    }

    fn settle(&self, request_id: &str) {
        let mut settled = self.settled.lock().unwrap_or_else(|p| p.into_inner());
        settled.insert(request_id.to_owned());
    }

    async fn record_stale(
        &self,
        store: &dyn MailboxStore,
        run_id: &str,
        request: &RequestRecord,
        text: String,
    ) -> anyhow::Result<()> {
        let record = NewRecord {
            agent: LEAD.into(),
            stream: ISOLATION_STREAM.into(),
            seq: None,
            body: serde_json::to_value(IsolationRecord::MergeStale {
                request_id: request.request_id.clone(),
            })?,
        };
        let key = Some(format!("{}:stale", request.request_id));
        store
            .commit_turn(CommitTurn {
                run_id: run_id.to_owned(),
                agent: LEAD.into(),
                records: vec![record],
                sends: vec![notice(run_id, &request.requester, text, key)],
                ..CommitTurn::default()
            })
            .await?;
        self.settle(&request.request_id);
        Ok(())
    }

    /// The end of a completed run: the recorded result applied to the user's working tree
    /// when it still matches the base, else left on the integration branch. The decision is
    /// recorded first; a resume after a kill half-way carries out the recorded one, and once
    /// the apply is recorded done (`applied`), a resume reports it without writing the tree.
    pub(crate) async fn deliver(
        &self,
        store: &dyn MailboxStore,
        run_id: &str,
    ) -> anyhow::Result<Delivered> {
        let head = self.head().await;
        let base = self.base();
        let stretch = this_stretch(store, run_id).await?;
        if let Some((commit, files)) = stretch.iter().find_map(|record| match record {
            IsolationRecord::Applied { commit, files } => Some((commit.clone(), *files)),
            _ => None,
        }) {
            return Ok(Delivered::Applied { commit, files });
        }
        let decided = stretch.into_iter().find_map(|record| match record {
            IsolationRecord::Final {
                apply,
                commit,
                gate,
            } => Some((apply, commit, gate)),
            _ => None,
        });
        let (apply, commit, gate) = match decided {
            Some(decided) => decided,
            None if head == base.commit => return Ok(Delivered::Nothing),
            None => {
                // The gate runs before the decision is recorded: killed during it, a resume
                // runs it again; recorded, its result is what every resume carries out.
                let gate = match &self.gate {
                    Some(gate) if gate.before_apply() => {
                        Some(gate.run(&self.worktrees, &head, &head, "final").await?)
                    }
                    _ => None,
                };
                let passed = gate.as_ref().is_none_or(|result| result.passed);
                let apply = passed && self.worktrees.user_tree_matches(&base).await?;
                let final_record = IsolationRecord::Final {
                    apply,
                    commit: head.clone(),
                    gate: gate.clone(),
                };
                append(store, run_id, &final_record).await?;
                (apply, head, gate)
            }
        };
        if let Some(gate) = gate.filter(|result| !result.passed) {
            return Ok(Delivered::GateFailed {
                branch: self.worktrees.lead_branch(),
                commit,
                gate,
            });
        }
        if !apply {
            return Ok(Delivered::OnBranch {
                branch: self.worktrees.lead_branch(),
                commit,
            });
        }
        muster_mailbox::failpoint!("final_apply");
        let files = self.worktrees.apply_to_user_tree(&base, &commit).await?;
        let done = IsolationRecord::Applied {
            commit: commit.clone(),
            files,
        };
        append(store, run_id, &done).await?;
        Ok(Delivered::Applied { commit, files })
    }
}

/// What became of a completed run's result, as a continuation finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PreviousResult {
    /// Applied to the user's tree (or nothing was merged): the worktrees start again from
    /// the user's current tree.
    FreshBase(Base),
    /// Left on the integration branch (the user's tree had changed): the team goes on from
    /// it, and the next ending tries again to apply it.
    OnBranch { branch: String },
}

impl TeamIsolation {
    /// A completed run about to be continued: a fresh base (HEAD plus the working tree's
    /// changes, as at a run's start) when its result was applied or nothing was merged;
    /// otherwise the integration branch goes on. Only git objects are written here; the
    /// continuation's commit records the choice.
    pub(crate) async fn previous_result(
        &self,
        store: &dyn MailboxStore,
        run_id: &str,
    ) -> anyhow::Result<PreviousResult> {
        let left_on_branch = this_stretch(store, run_id)
            .await?
            .into_iter()
            .any(|record| matches!(record, IsolationRecord::Final { apply: false, .. }));
        if left_on_branch {
            return Ok(PreviousResult::OnBranch {
                branch: self.worktrees.lead_branch(),
            });
        }
        Ok(PreviousResult::FreshBase(self.worktrees.make_base().await?))
    }

    /// The records a continuation commits with the lead's new turn: the stretch's end in
    /// the isolation stream and, with a fresh base, every worktree's checkpoint at it (the
    /// lead's moves the integration head there).
    pub(crate) fn continuation_records(
        fresh: Option<&Base>,
        teammates: &[String],
    ) -> anyhow::Result<Vec<NewRecord>> {
        let mut records = vec![NewRecord {
            agent: LEAD.into(),
            stream: ISOLATION_STREAM.into(),
            seq: None,
            body: serde_json::to_value(IsolationRecord::Continued {
                base: fresh.cloned(),
            })?,
        }];
        if let Some(base) = fresh {
            for agent in std::iter::once(LEAD).chain(teammates.iter().map(String::as_str)) {
                let checkpoint = Record::Checkpoint {
                    commit: base.commit.clone(),
                    merging: None,
                    merge: None,
                };
                records.push(checkpoint.to_new(agent)?);
            }
        }
        Ok(records)
    }

    /// After the continuation's commit, in this process: the fresh base is the base and the
    /// integration head, and the lead's worktree is put on it.
    pub(crate) async fn continue_from(&self, base: Base) -> anyhow::Result<()> {
        let mut head = self.head.lock().await;
        let checkpoint = Checkpoint {
            commit: base.commit.clone(),
            merging: None,
        };
        self.worktrees.restore(LEAD, &checkpoint).await?;
        self.publish(LEAD, &base.commit).await?;
        *head = base.commit.clone();
        self.set_recorded(LEAD, checkpoint);
        *self.base.lock().unwrap_or_else(|p| p.into_inner()) = base;
        Ok(())
    }
}

/// The isolation records of the run's current stretch: those after its latest continuation.
async fn this_stretch(
    store: &dyn MailboxStore,
    run_id: &str,
) -> anyhow::Result<Vec<IsolationRecord>> {
    let mut stretch = Vec::new();
    for row in store.records(run_id, LEAD, ISOLATION_STREAM, 0).await? {
        match serde_json::from_value::<IsolationRecord>(row.body) {
            Ok(IsolationRecord::Continued { .. }) => stretch.clear(),
            Ok(record) => stretch.push(record),
            Err(_) => {}
        }
    }
    Ok(stretch)
}

/// A merge carried out.
#[derive(Debug, Clone)]
pub(crate) struct Applied {
    pub request_id: String,
    pub agent: String,
    pub commit: String,
    /// How many files the merge changed.
    pub files: usize,
}

impl Applied {
    /// The `merge_applied` event.
    pub(crate) fn event(&self) -> muster_agents::runtime::RunEvent {
        muster_agents::runtime::RunEvent::MergeApplied {
            agent: self.agent.clone(),
            request_id: self.request_id.clone(),
            commit: self.commit.clone(),
            files: self.files,
        }
    }
}

fn approved(request: &RequestRecord) -> bool {
    request
        .response
        .as_ref()
        .and_then(|response| response.body.approved())
        .unwrap_or(false)
}

/// The teammate's checkpoint commit a merge request asks to merge.
fn merge_commit(request: &RequestRecord) -> Option<&str> {
    match &request.body {
        MessageBody::MergeRequest { commit, .. } => Some(commit),
        _ => None,
    }
}

/// The integration head a merge request's gate pass was tested on.
fn tested_head(request: &RequestRecord) -> Option<&str> {
    match &request.body {
        MessageBody::MergeRequest {
            tested: Some(tested),
            ..
        } => tested["head"].as_str(),
        _ => None,
    }
}

/// What a teammate reads when its merge failed the test gate: the command, how it ended, the
/// files the merge touched and the output's tail.
fn gate_failure_text(
    result: &super::gate::GateResult,
    files: &[String],
    approved: Option<&str>,
) -> String {
    let when = match approved {
        Some(request_id) => format!(
            "{request_id} was approved, but the integration branch moved meanwhile and the \
             merged result fails the project's tests"
        ),
        None => {
            "Your merge was not requested: the merged result fails the project's tests".to_owned()
        }
    };
    let ended = match result.exit {
        Some(code) => format!("exit {code}"),
        None => "no exit code".to_owned(),
    };
    format!(
        "{when}. `{}` on your branch merged with the integration head {} ended with {ended} \
         after {:.1}s. The merge touches: {}. The end of its output:\n{}\nFix your branch \
         (the integration branch's changes are not in your worktree: `git merge {}` brings \
         them), run the tests, then end your turn: muster tests and asks for the merge again.",
        result.command,
        result.head,
        result.seconds,
        files.join(", "),
        result.tail.trim_end(),
        result.head,
    )
}

/// Mail from the lead's side of muster to a teammate about its merge.
fn notice(run_id: &str, agent: &str, text: String, key: Option<String>) -> NewMessage {
    NewMessage {
        run_id: run_id.to_owned(),
        sender: LEAD.into(),
        recipient: agent.to_owned(),
        body: MessageBody::Text {
            text,
            summary: Some("merge".into()),
        },
        idempotency_key: key,
    }
}

async fn append(
    store: &dyn MailboxStore,
    run_id: &str,
    record: &IsolationRecord,
) -> anyhow::Result<()> {
    store
        .append_records(
            run_id,
            vec![NewRecord {
                agent: LEAD.into(),
                stream: ISOLATION_STREAM.into(),
                seq: None,
                body: serde_json::to_value(record)?,
            }],
        )
        .await?;
    Ok(())
}

/// The newest checkpoint in agent `agent`'s transcript.
async fn newest_checkpoint(
    store: &dyn MailboxStore,
    run_id: &str,
    agent: &str,
) -> anyhow::Result<Option<Checkpoint>> {
    let mut newest = None;
    for row in store.records(run_id, agent, TRANSCRIPT, 0).await? {
        if let Ok(Record::Checkpoint {
            commit, merging, ..
        }) = Record::from_stored(&row)
        {
            newest = Some(Checkpoint { commit, merging });
        }
    }
    Ok(newest)
}

/// Who decides a merge that changes `files`: a person when it adds or changes a protected file
/// (the files that define rules, hooks, servers and the team), whoever the team file names
/// otherwise. A teammate could create such a file in its worktree (the sandbox binds only the
/// ones that exist read-only), and merged it would define the user's next runs.
fn merge_responder(responder: &str, files: &[String]) -> String {
    let protected = muster_config::protected::ProtectedFiles::standard_ref();
    if files
        .iter()
        .any(|file| protected.matching(std::path::Path::new(file)).is_some())
    {
        return muster_mailbox::HUMAN.to_owned();
    }
    responder.to_owned()
}
