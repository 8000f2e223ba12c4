import Foundation
import Store

/// Commits a service's open batch. A commit that keeps failing ends the
/// process: it happens before the batch's acknowledgements are written, so
/// the broker redelivers every message of it to the next run and nothing is
/// lost; carrying on would acknowledge messages that were never stored.
public enum BatchCommit {
    /// `finish` writes what the batch left in memory (rows written once per
    /// batch rather than once per message); it is part of the same commit.
    public static func commit(_ db: Database, logger: Logger, counters: HealthCounters? = nil,
                              finish: () throws -> Void = {}) {
        guard db.hasOpenBatch else { return }
        counters?.count("commits")
        do {
            try finish()
        } catch {
            logger.error("cannot write the batch's rows; exiting before acknowledging it", ["error": "\(error)"])
            exit(75)
        }
        var lastError: (any Error)?
        for attempt in 1...3 {
            do {
                try db.commitBatch()
                return
            } catch {
                lastError = error
                logger.error("commit failed", ["attempt": "\(attempt)", "error": "\(error)"])
                usleep(useconds_t(50_000 * attempt))
            }
        }
        logger.error("cannot commit; exiting before acknowledging the batch", ["error": "\(lastError.map { "\($0)" } ?? "?")"])
        exit(75)  // EX_TEMPFAIL: the supervisor restarts us; the broker redelivers
    }
}
