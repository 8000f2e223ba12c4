import Foundation

/// `tracker-bench fleet [N] [ROUNDS]`: issue 28's question in one run. The
/// whole constellation's throughput (`constellation`, throughput alone) over
/// 10, 1,000 and 10,000 devices already driving (nine fixes each first,
/// unmeasured), N fixes each time, alternated ROUNDS times: the machine's
/// speed wanders between minutes, so each round's ratios compare runs a
/// minute apart, and the medians say where the rounds agree.
enum FleetBench {
    static let fleets = [10, 1_000, 10_000]

    static func run(count: Int, rounds: Int) async throws {
        var outcomes: [Int: [ConstellationBench.Outcome]] = [:]
        for round in 1...rounds {
            for devices in fleets {
                outcomes[devices, default: []].append(try await ConstellationBench.run(
                    count: count, devices: devices, warmup: Throughput.firstFixWarmup, measuresLatency: false, readsMemory: false))
            }
            print("round \(round): " + fleets.map { devices in
                let o = outcomes[devices]![round - 1]
                return String(format: "%d devices %.0f fixes/s (%.0f µs a fix, %.2f of the relays)", devices, o.throughput, o.cpuPerFixUs,
                              o.throughput / o.relays)
            }.joined(separator: "; "))
        }
        let base = outcomes[fleets[0]]!
        print("against \(fleets[0]) devices, each round and the median: " + fleets.dropFirst().map { devices in
            let each = zip(outcomes[devices]!, base).map { $0.throughput / $1.throughput }
            return "\(devices) devices " + each.map { String(format: "%.2f", $0) }.joined(separator: " · ") + String(format: " (%.2f)", each.median)
        }.joined(separator: "; "))
        print("against the relays, median: " + fleets.map { devices in
            String(format: "%d devices %.2f", devices, outcomes[devices]!.map { $0.throughput / $0.relays }.median)
        }.joined(separator: ", "))
    }
}
