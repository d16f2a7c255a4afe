//! Fencing: a process running a work item writes only while its lease is the item's.

use crate::error::{StoreError, StoreResult};
use crate::work::{WorkFence, WorkState};

/// Whether `fence` still holds its item, given the item's stored `(token, state)` (`None`:
/// no such item).
pub(crate) fn fence_holds(fence: &WorkFence, stored: Option<(i64, String)>) -> StoreResult<()> {
    let Some((token, state)) = stored else {
        return Err(StoreError::UnknownWorkItem(fence.item.clone()));
    };
    if token == fence.token && state == WorkState::Leased.as_str() {
        return Ok(());
    }
    Err(StoreError::Fenced {
        item: fence.item.clone(),
        token: fence.token,
        current: token,
        state,
    })
}

/// Why a write under `fence` changed nothing, given the item's stored `(token, state)`.
pub(crate) fn fence_refusal(fence: &WorkFence, stored: Option<(i64, String)>) -> StoreError {
    match fence_holds(fence, stored) {
        Err(error) => error,
        // Not reached within one transaction: the write's own WHERE held.
        Ok(()) => StoreError::Fenced {
            item: fence.item.clone(),
            token: fence.token,
            current: fence.token,
            state: WorkState::Leased.as_str().into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_current_lease_writes() {
        let fence = WorkFence {
            item: "w1".into(),
            token: 3,
        };
        let leased = WorkState::Leased.as_str().to_owned();
        let table = [
            (Some((3, leased.clone())), "ok"),
            (Some((4, leased)), "Fenced"),
            (Some((3, WorkState::Done.as_str().to_owned())), "Fenced"),
            (None, "UnknownWorkItem"),
        ];
        for (stored, want) in table {
            let outcome = fence_holds(&fence, stored.clone());
            let got = match &outcome {
                Ok(()) => "ok".to_owned(),
                Err(error) => format!("{error:?}"),
            };
            assert!(got.starts_with(want), "{stored:?}: {got}");
        }
    }
}
