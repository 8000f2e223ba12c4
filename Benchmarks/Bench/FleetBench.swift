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
        var ratios: [Int: [Double]] = [:], relayRatios: [Int: [Double]] = [:]
        for round in 1...rounds {
            var outcomes: [Int: ConstellationBench.Outcome] = [:]
            for devices in fleets {
                let outcome = try await ConstellationBench.run(count: count, devices: devices, warmup: Throughput.firstFixWarmup,
                                                               measuresLatency: false, readsMemory: false)
                outcomes[devices] = outcome
                relayRatios[devices, default: []].append(outcome.throughput / outcome.relays)
            }
            let base = outcomes[fleets[0]]!
            for devices in fleets.dropFirst() { ratios[devices, default: []].append(outcomes[devices]!.throughput / base.throughput) }
            print("round \(round): " + fleets.map { devices in
                let o = outcomes[devices]!
                return String(format: "%d devices %.0f fixes/s (%.0f µs a fix, %.2f of the relays)", devices, o.throughput, o.cpuPerFixUs,
                              o.throughput / o.relays)
            }.joined(separator: "; "))
        }
        print("against 10 devices, each round and the median: " + fleets.dropFirst().map { devices in
            let each = ratios[devices]!
            return "\(devices) devices " + each.map { String(format: "%.2f", $0) }.joined(separator: " · ") + String(format: " (%.2f)", median(each))
        }.joined(separator: "; "))
        print("against the relays, median: " + fleets.map { String(format: "%d devices %.2f", $0, median(relayRatios[$0]!)) }.joined(separator: ", "))
    }

    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
    }
}
