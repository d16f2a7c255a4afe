//! Room for the WAL: its file written out to the size it reaches between checkpoints, once.
//!
//! SQLite appends to the WAL until a checkpoint, then writes it again from its beginning, the
//! file keeping its size. Until the first checkpoint every commit grows the file, and the sync
//! that makes a commit durable then writes the file's metadata too: measured on this kind of
//! disk, syncing 40 KiB appended took 0.19–0.21 ms against 0.12–0.13 ms for 40 KiB written over,
//! and a whole COMMIT at `synchronous=FULL` 0.25–0.30 ms against 0.16–0.21 ms over the WAL's
//! first 4 MB. A store that keeps writing gets that room (written, not a sparse hole: writing
//! into a hole allocates blocks, which is metadata again) after its first few writes, so a
//! store opened for a look or a single write keeps the small WAL SQLite leaves.
//!
//! Zeros past the WAL's last frame are no frames: SQLite reads frames only while their salts
//! and checksums match the header's, so a reader, a recovery or a copy taken now sees what it
//! saw before.

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use rusqlite::Connection;

/// The WAL's header; each frame carries a header of its own before its page.
const WAL_HEADER: u64 = 32;
const FRAME_HEADER: u64 = 24;

/// Writing transactions after which the store makes room (see the module's note).
pub(crate) const ROOM_AFTER_WRITES: u64 = 16;

/// Zero-extends the WAL at `wal` to the size it reaches before SQLite checkpoints it, holding
/// the write lock so no commit appends meanwhile.
pub(crate) fn make_room(conn: &Connection, wal: &Path) -> Result<(), RoomError> {
    let page: i64 = conn.pragma_query_value(None, "page_size", |row| row.get(0))?;
    let pages: i64 = conn.pragma_query_value(None, "wal_autocheckpoint", |row| row.get(0))?;
    let room = WAL_HEADER + pages.max(0) as u64 * (page.max(0) as u64 + FRAME_HEADER);
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let extended = extend(wal, room);
    if let Err(error) = conn.execute_batch("COMMIT") {
        // Never left open: the writer's next BEGIN would fail, and every batch with it.
        let _ = conn.execute_batch("ROLLBACK");
        return Err(error.into());
    }
    Ok(extended?)
}

/// Writes zeros from the file's end to `room` and syncs them; a file as large already is left.
fn extend(path: &Path, room: u64) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new().write(true).open(path)?;
    let size = file.metadata()?.len();
    if size >= room {
        return Ok(());
    }
    file.seek(SeekFrom::Start(size))?;
    let zeros = [0u8; 64 * 1024];
    let mut left = room - size;
    while left > 0 {
        let chunk = usize::try_from(left.min(zeros.len() as u64)).unwrap_or(zeros.len());
        file.write_all(&zeros[..chunk])?;
        left -= chunk as u64;
        // A crash test kills here, the room part-written.
        crate::failpoint!("wal_room");
    }
    file.sync_all()
}

/// Why the WAL got no room; the store goes on without it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RoomError {
    #[error("reading the WAL's page size or locking the store: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("writing the WAL's room: {0}")]
    Io(#[from] std::io::Error),
}
