import CSQLite
import Dispatch
import Synchronization
import TrackerLog

/// Who copies a writer's WAL back into its file, decided after each of the
/// writer's commits from the frames in the WAL.
///
/// SQLite's own automatic checkpoint runs inside the commit that crossed its
/// threshold and ends with two fdatasyncs: under a busy constellation a
/// commit of three messages then took 15–25 ms instead of under one, every
/// second or two, in each service (perf's sched_switch put the waits in
/// `fdatasync`). A second connection can checkpoint beside the writer in WAL
/// mode, copying what no reader still needs without waiting on anyone. But
/// the WAL only starts over from its beginning once every frame in it is
/// copied, and a writer that commits every few milliseconds always adds some
/// while the thread syncs. So the thread copies the bulk, and once it has
/// left only a few frames behind, the writer copies those itself: a short
/// checkpoint (its syncs cover those few frames), after which its next
/// transaction starts the WAL over. A writer that adds more than that
/// during each of the thread's rounds is allowed twice as many frames each
/// round, so the WAL starts over within a few rounds.
struct CheckpointPlan {
    enum Step: Equatable {
        case none
        /// Ask the checkpoint thread.
        case background
        /// Checkpoint on the writer's own connection, now.
        case inline
    }

    /// Frames in the WAL (about 4 KB each) before a checkpoint is due: SQLite's own default.
    static let threshold: Int32 = 1_000
    /// At most this many frames left behind by the thread, the writer copies
    /// them itself (cheap to sync); doubled for each round that left more.
    static let finishLimit: Int32 = 128
    /// The most doublings of `finishLimit` (2,048 frames, about 8 MB).
    static let maxDoublings: Int32 = 4
    /// Past this many frames the thread is not keeping up (a disk slower than
    /// the writer): the writer checkpoints itself, as SQLite would, so the
    /// WAL stays bounded (about 64 MB).
    static let inlineThreshold: Int32 = 16_000

    private(set) var running = false
    /// The WAL's length when the thread's last checkpoint copied all of it.
    private(set) var copiedThrough: Int32?
    /// Rounds of the thread since the WAL last started over that left more than the limit.
    private(set) var roundsBehind: Int32 = 0

    /// The frames the writer copies itself now.
    var limit: Int32 { Self.finishLimit << min(roundsBehind, Self.maxDoublings) }

    init() {}

    /// After a commit of the writer that left `frames` in the WAL.
    mutating func committed(frames: Int32) -> Step {
        guard frames >= Self.threshold else {
            // The WAL started over: what the thread copied was another WAL's.
            (copiedThrough, roundsBehind) = (nil, 0)
            return .none
        }
        if frames >= Self.inlineThreshold {
            copiedThrough = nil
            return .inline
        }
        if running { return .none }
        // What the thread's last round left behind counts once.
        let copied = copiedThrough
        copiedThrough = nil
        if let copied, frames >= copied {
            if frames - copied <= limit { return .inline }
            roundsBehind += 1
        }
        running = true
        return .background
    }

    /// The thread's checkpoint ended: `log` frames were in the WAL, `copied`
    /// of them copied (fewer while a reader still needs the rest), or it failed.
    mutating func finished(log: Int32, copied: Int32, succeeded: Bool) {
        running = false
        // A connection that has not found the WAL answers -1 for both.
        copiedThrough = succeeded && log >= 0 && copied == log ? log : nil
    }
}

/// A writer's checkpoints on the process's checkpoint queue (see `CheckpointPlan`).
final class BackgroundCheckpoints: Sendable {
    /// One queue for every store in the process: a checkpoint waits on the
    /// disk, not on the CPU, and the stores take turns.
    static let queue = DispatchQueue(label: "tracker.sqlite-checkpoints", qos: .utility)

    private let path: String
    private let plan = Mutex(CheckpointPlan())
    /// The queue's own connection, opened at its first checkpoint; only the
    /// queue uses it, and none is opened once the writer closed.
    private let connection = Mutex<(handle: OpaquePointer?, closed: Bool)>((nil, false))
    /// What the last checkpoint failed with, said once until one succeeds.
    private let failure = Mutex<Int32?>(nil)
    private let logger: Logger

    init(path: String, logger: Logger) {
        self.path = path
        self.logger = logger
    }

    /// After each commit of the writer (its WAL hook), `frames` in the WAL
    /// now: true when the writer must checkpoint itself.
    func writerCheckpoints(afterCommitLeaving frames: Int32) -> Bool {
        switch plan.withLock({ $0.committed(frames: frames) }) {
        case .none: return false
        case .inline: return true
        case .background:
            Self.queue.async { self.run() }
            return false
        }
    }

    /// Runs `body` with no checkpoint of the queue under way, none starting
    /// until it returns, and the queue's connection closed (so it holds no
    /// read lock on the WAL, which a truncating checkpoint needs).
    func whileStopped<T>(_ body: () throws -> T) rethrows -> T {
        try Self.queue.sync {
            closeConnection(for: false)
            return try body()
        }
    }

    /// The writer closed: what is queued does nothing, and the connection closes.
    func close() {
        Self.queue.sync { closeConnection(for: true) }
    }

    private func run() {
        var logFrames: Int32 = 0, copied: Int32 = 0
        let succeeded = connection.withLock { connection -> Bool in
            guard !connection.closed else { return false }
            if connection.handle == nil { connection.handle = open() }
            guard let db = connection.handle else { return false }
            let rc = sqlite3_wal_checkpoint_v2(db, nil, SQLITE_CHECKPOINT_PASSIVE, &logFrames, &copied)
            record(rc, db)
            return rc == SQLITE_OK
        }
        plan.withLock { $0.finished(log: logFrames, copied: copied, succeeded: succeeded) }
    }

    private func open() -> OpaquePointer? {
        var db: OpaquePointer?
        let rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nil)
        guard rc == SQLITE_OK, let db else {
            record(rc, db)
            if let db { sqlite3_close_v2(db) }
            return nil
        }
        // A new connection finds the WAL at its first read; until then it
        // checkpoints nothing (SQLite answers -1 frames). Synced as the writer is.
        sqlite3_busy_timeout(db, 1_000)
        let setUp = sqlite3_exec(db, "PRAGMA synchronous=NORMAL; SELECT count(*) FROM sqlite_master", nil, nil, nil)
        guard setUp == SQLITE_OK else {
            record(setUp, db)
            sqlite3_close_v2(db)
            return nil
        }
        return db
    }

    private func closeConnection(for good: Bool) {
        connection.withLock { connection in
            if let db = connection.handle { sqlite3_close_v2(db) }
            connection.handle = nil
            if good { connection.closed = true }
        }
    }

    /// A checkpoint's outcome, the queue's or the writer's: a failure is
    /// logged once, until one succeeds. BUSY says only that another
    /// checkpoint holds the lock (and copies as much): neither.
    func record(_ rc: Int32, _ db: OpaquePointer?) {
        guard rc != SQLITE_BUSY else { return }
        let isNew = failure.withLock { last -> Bool in
            defer { last = rc == SQLITE_OK ? nil : rc }
            return rc != SQLITE_OK && last == nil
        }
        guard isNew else { return }
        let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(rc))
        logger.warning("checkpoint failed; the WAL grows until one succeeds (the writer tries itself past \(CheckpointPlan.inlineThreshold) frames)",
                       ["path": path, "error": message])
    }

    deinit { closeConnection(for: true) }
}
