import Bus
import FoundationEssentials
import Model
import Store

/// Keeping the logs to their bounds (network thread, within the batch).
extension ServiceHost {
    /// Saves the outbox watermarks that moved and have waited unsaved since
    /// `cutoff`, at most `limit` of them (all by default), and trims the
    /// outbox log below them.
    func saveWatermarks(movedByMs cutoff: Int64 = .max, limit: Int = .max) throws {
        guard let outbox, let route = routes.outbox else { return }
        let moved = outbox.takeUnsaved(movedByMs: cutoff, limit: limit)
        do {
            let outboxRetention = retention[ObjectIdentifier(route.log)]
            let keep = Int64(outboxRetention?.keep ?? 0)
            for (device, acked) in moved {
                try store.saveAckedThrough(device, acked)
                if let highest = outbox.highestSent(device) {
                    let trimmed = try route.log.trim(device, through: min(acked, highest - keep))
                    outboxRetention?.total -= trimmed
                }
            }
        } catch {
            outbox.unsave(moved)
            throw error
        }
    }

    /// A log over its `maxTotal` is cut to an equal share per device (to 90 %
    /// of the total, so this runs seldom); an outbox never below what the
    /// broker acknowledged. The share stays while the fleet needs it.
    func holdLogsToTheirTotals() throws {
        for capped in routes.retention {
            guard let maxTotal = capped.maxTotal else { continue }
            if capped.total <= maxTotal {
                if let share = capped.share, capped.total < maxTotal / 2, share < capped.keepPerDevice { capped.share = nil }
                continue
            }
            // A service's own deletes (an age limit) are not followed: count before cutting.
            capped.total = try capped.log.totalCount()
            guard capped.total > maxTotal else { continue }
            let devices = try store.devices()
            let share = max(1, maxTotal * 9 / 10 / max(1, devices.count))
            capped.share = share
            let isOutbox = capped.log === routes.outbox?.log
            for (device, saved) in devices {
                guard let newest = try capped.log.newestSeq(device) else { continue }
                var through = newest - Int64(share)
                if isOutbox { through = min(through, max(saved, outbox?.ackedThrough(device) ?? 0)) }
                try capped.log.trim(device, through: through)
            }
            capped.total = try capped.log.totalCount()
            counters.count("logsCapped")
            logger.info("log held to its total; each device keeps an equal share",
                        ["log": capped.log.table, "maxTotal": "\(maxTotal)", "share": "\(share)", "devices": "\(devices.count)"])
        }
    }
}
