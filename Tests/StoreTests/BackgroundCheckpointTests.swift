import Foundation
@testable import Store
import Testing

/// Who copies the WAL back after a commit: the thread for the bulk, the
/// writer for the last few frames, the writer alone when the thread falls
/// far behind.
struct CheckpointPlanTests {
    let threshold = CheckpointPlan.threshold, finish = CheckpointPlan.finishLimit

    @Test func aShortWALNeedsNothing() {
        var plan = CheckpointPlan()
        #expect(plan.committed(frames: 0) == .none)
        #expect(plan.committed(frames: threshold - 1) == .none)
    }

    @Test func theThreadIsAskedOnceWhileItWorks() {
        var plan = CheckpointPlan()
        #expect(plan.committed(frames: threshold) == .background)
        #expect(plan.committed(frames: threshold + 50) == .none)
        #expect(plan.committed(frames: threshold + 500) == .none)
    }

    @Test func theWriterCopiesTheFewFramesTheThreadLeft() {
        var plan = CheckpointPlan()
        #expect(plan.committed(frames: threshold) == .background)
        plan.finished(log: threshold, copied: threshold, succeeded: true)
        #expect(plan.committed(frames: threshold + finish) == .inline)
        // Once: the WAL starts over at the writer's next transaction.
        #expect(plan.committed(frames: threshold + finish + 5) == .background)
    }

    @Test func manyFramesLeftGoToTheThreadAgain() {
        var plan = CheckpointPlan()
        _ = plan.committed(frames: threshold)
        plan.finished(log: threshold, copied: threshold, succeeded: true)
        #expect(plan.committed(frames: threshold + finish + 1) == .background)
    }

    /// A writer that adds more than the limit during each of the thread's
    /// rounds still gets its WAL to start over: the limit doubles each round.
    @Test func aBusyWriterFinishesWithinAFewRounds() {
        var plan = CheckpointPlan()
        var frames = threshold
        #expect(plan.committed(frames: frames) == .background)
        var rounds = 0
        while rounds < 10 {
            plan.finished(log: frames, copied: frames, succeeded: true)
            frames += 300  // added while the thread synced
            if plan.committed(frames: frames) == .inline { break }
            rounds += 1
        }
        #expect(rounds == 2, "128, 256, then 512 frames allowed")
        #expect(plan.limit == finish << 2)
        // Started over: back to the first limit.
        #expect(plan.committed(frames: 2) == .none)
        #expect(plan.limit == finish)
    }

    @Test func framesAReaderHeldBackOrAFailureAreNotLeftToTheWriter() {
        var plan = CheckpointPlan()
        _ = plan.committed(frames: threshold)
        plan.finished(log: threshold, copied: threshold - 10, succeeded: true)
        #expect(plan.committed(frames: threshold + 1) == .background)
        plan.finished(log: threshold + 1, copied: threshold + 1, succeeded: false)
        #expect(plan.committed(frames: threshold + 2) == .background)
        // Not in WAL mode as the thread's connection saw it: nothing copied.
        plan.finished(log: -1, copied: -1, succeeded: true)
        #expect(plan.committed(frames: threshold + 3) == .background)
    }

    @Test func whatTheThreadCopiedOfAnEarlierWALDoesNotCount() {
        var plan = CheckpointPlan()
        _ = plan.committed(frames: threshold)
        plan.finished(log: threshold, copied: threshold, succeeded: true)
        // The WAL started over (the writer's own checkpoint), then grew again.
        #expect(plan.committed(frames: 3) == .none)
        #expect(plan.committed(frames: threshold + 1) == .background)
    }

    @Test func aThreadFarBehindLeavesItToTheWriter() {
        var plan = CheckpointPlan()
        #expect(plan.committed(frames: threshold) == .background)
        #expect(plan.committed(frames: CheckpointPlan.inlineThreshold) == .inline)
    }
}

/// The checkpoint thread against a real file.
struct BackgroundCheckpointTests {
    func temporaryPath() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("checkpoints-\(UUID().uuidString).sqlite").path
    }

    func size(_ path: String) -> Int { (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0 }

    /// A commit past the threshold returns without copying anything (the
    /// queue, held here, has not run); the queue then copies it into the
    /// file; the writer's next commit finishes, and the WAL starts over.
    @Test func theQueueCopiesTheBulkAndTheWALStartsOver() throws {
        let path = temporaryPath()
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        let db = try Database(path: path)
        try db.execute("CREATE TABLE t (a BLOB)")
        let before = size(path)
        let held = DispatchSemaphore(value: 0)
        BackgroundCheckpoints.queue.async { held.wait() }
        // About 1,100 pages: one 3,000-byte row a page.
        try db.transaction {
            try db.execute("""
                WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 1100)
                INSERT INTO t SELECT randomblob(3000) FROM n
                """)
        }
        #expect(size(path) < before + 100 * 4_096, "the commit copied nothing itself")
        held.signal()
        BackgroundCheckpoints.queue.sync {}
        #expect(size(path) >= before + 1_000 * 4_096, "the queue copied the WAL into the file")
        // The thread left the frames of nothing since: the writer finishes, and starts over.
        try db.run("INSERT INTO t VALUES (x'01')")
        try db.run("INSERT INTO t VALUES (x'02')")
        let frames = try db.first("PRAGMA wal_checkpoint(PASSIVE)") { $0.int(1) }
        #expect((frames ?? .max) < 10, "the WAL started over: \(frames ?? -1) frames")
        #expect(try db.query("SELECT count(*) FROM t") { $0.int(0) } == [1_102])
    }

    /// A graceful stop's checkpoint waits for the thread and leaves an empty WAL.
    @Test func theStopsCheckpointEmptiesTheWAL() throws {
        let path = temporaryPath()
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        let db = try Database(path: path)
        try db.execute("CREATE TABLE t (a BLOB)")
        for _ in 0..<20 {
            try db.transaction {
                try db.execute("""
                    WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 100)
                    INSERT INTO t SELECT randomblob(3000) FROM n
                    """)
            }
        }
        try db.checkpoint()
        #expect(size(path + "-wal") == 0)
        #expect(try db.query("SELECT count(*) FROM t") { $0.int(0) } == [2_000])
    }
}
