import Foundation
import Model
import TestSupport

/// Each process's CPU time (user, system; seconds) at one moment: taken
/// before and after a run, it says what a fix cost where.
struct CPUTimes {
    var processes: [(name: String, user: Double, system: Double)]

    init(_ processes: [(String, (user: Double, system: Double)?)]) {
        self.processes = processes.map { ($0.0, $0.1?.user ?? 0, $0.1?.system ?? 0) }
    }

    /// The broker and every service of `constellation`.
    init(_ constellation: Constellation) {
        self.init([("broker", constellation.broker.cpu)] + Constellation.services.map { ($0, constellation.services[$0]!.process?.cpu) })
    }

    /// Every process's user and system time together.
    var total: Double { processes.reduce(0) { $0 + $1.user + $1.system } }

    /// "name u + s µs, …  (t µs in all)": the CPU of each process per fix since `before`.
    func perFix(since before: CPUTimes, count: Int) -> String {
        let spent = zip(processes, before.processes).map {
            (name: $0.name, user: ($0.user - $1.user) / Double(count) * 1e6, system: ($0.system - $1.system) / Double(count) * 1e6)
        }
        return spent.map { String(format: "%@ %.0f + %.0f µs", $0.name as NSString, $0.user, $0.system) }.joined(separator: ", ")
            + String(format: " (%.0f µs in all)", totalPerFix(since: before, count: count))
    }

    /// Every process's CPU per fix since `before`, together (µs).
    func totalPerFix(since before: CPUTimes, count: Int) -> Double { (total - before.total) / Double(count) * 1e6 }
}

extension Health {
    /// Messages whose device's state was not in the service's cache, read from its store.
    var rowLoadsPerMessage: Double { Double(counters?["rowLoads"] ?? 0) / Double(max(1, processed)) }
}

/// Each process's memory (resident, peak, its own; bytes) as a run ends, and
/// once idle: a service hands its freed heap back at its first idle tick
/// (`HeapTrims`), but not within 10 s of its last trim.
struct MemoryReadings {
    typealias Reading = (resident: Int, peak: Int, own: Int)?
    let busy: [Reading]
    let idle: [Reading]

    /// Read now, then again once `settle` has returned and 12 s have passed.
    static func take(_ processes: [ChildProcess?], settle: () async throws -> Void = {}) async throws -> MemoryReadings {
        let busy = processes.map { $0?.memory }
        try await settle()
        try await Task.sleep(for: .seconds(12))
        return MemoryReadings(busy: busy, idle: processes.map { $0?.memory })
    }
}

/// Bytes in MB, for the benches' lines.
func megabytes(_ bytes: Int?) -> Double { Double(bytes ?? 0) / 1_048_576 }

extension Array<Double> {
    /// The middle value (the mean of the two middle ones for an even count): a run's figure over repeats.
    var median: Double {
        precondition(!isEmpty, "the median of nothing")
        let sorted = sorted()
        return count % 2 == 1 ? sorted[count / 2] : (sorted[count / 2 - 1] + sorted[count / 2]) / 2
    }
}
