import Foundation
import TestSupport

/// `tracker-bench`: benchmarks (not tests). Build in release and run:
///   swift build -c release && .build/release/tracker-bench all
let arguments = Array(CommandLine.arguments.dropFirst())
let usage = "usage: tracker-bench all|gateway|filter|filter-core|quality [count] | http [count] | repair [count] | sweep [seeds] | breakdown VARIANT [seeds] | jump-floor [seeds] | trace FILE | host [count] [devices] | row-codec | memory [count] [devices] | retention [devices] [rounds] [total] | constellation [count] [devices] | fleet [count] [rounds] | scale-out [count] [rounds]"

/// The positive whole number at `arguments[index]`, or `fallback` when
/// there is none. Anything else is refused by name: a word was read as the
/// default, and 0 or a negative count crashed on an empty range.
func positiveArgument(_ index: Int, default fallback: Int) throws -> Int {
    guard index < arguments.count else { return fallback }
    guard let value = Int(arguments[index]), value > 0 else {
        throw TestSupportError("argument \(index + 1): expected a positive whole number, got '\(arguments[index])'")
    }
    return value
}

/// The whole number (at least `minimum`) an environment setting holds, nil
/// when unset; anything else is refused by name instead of read as unset.
func environmentNumber(_ name: String, minimum: Int = 0, maximum: Int = .max) throws -> Int? {
    guard let text = ProcessInfo.processInfo.environment[name] else { return nil }
    guard let value = Int(text), value >= minimum, value <= maximum else {
        let range = maximum == .max ? "at least \(minimum)" : "from \(minimum) to \(maximum)"
        throw TestSupportError("\(name): expected a whole number \(range), got '\(text)'")
    }
    return value
}

/// How many messages a throughput bench sends (the first argument after the bench's name).
var count: Int { get throws { try positiveArgument(1, default: 20_000) } }

func ratioLine(_ name: String, _ rate: Double, _ ceiling: Double, unit: String = "msg/s") {
    print(String(format: "%-26@ %9.0f %@   ratio to broker QoS 1 ceiling: %.2f", name as NSString, rate, unit as NSString, rate / ceiling))
}

// A failure says what went wrong and exits 1, without a crash report.
do {
    switch arguments.first {
    case "retention":
        try await RetentionBench.run(devices: arguments.count > 1 ? Int(arguments[1]) ?? 10_000 : 10_000,
                                     rounds: arguments.count > 2 ? Int(arguments[2]) ?? 60 : 60,
                                     total: arguments.count > 3 ? Int(arguments[3]) ?? 100_000 : 100_000)
    case "row-codec":
        try RowCodecBench.run()
    case "quality":
        try Quality.run(seeds: [1, 2, 3, 4, 5])
    case "relay" where arguments.count >= 2:
        try await Relay.serve(port: Int32(arguments[1])!, points: arguments.dropFirst(2).first == "points")
    case "relay-stage" where arguments.count >= 4:
        try await Relay.serveStage(port: Int32(arguments[1])!, name: arguments[2], input: arguments[3], leaves: Array(arguments.dropFirst(4)))
    case "map-page":
        try await MapPageBench.run(devices: try positiveArgument(1, default: 1_000),
                                   seconds: try positiveArgument(2, default: 20))
    case "scale-out":
        try await ScaleOutBench.run(count: try positiveArgument(1, default: 20_000), rounds: try positiveArgument(2, default: 2))
    case "fleet":
        try await FleetBench.run(count: count, rounds: try positiveArgument(2, default: 3))
    case "constellation":
        try await ConstellationBench.run(count: count, devices: arguments.count > 2 ? Int(arguments[2]) : nil)
    case "repair":
        try await RepairBench.run(count: try positiveArgument(1, default: 8_000))
    case "demo-recording" where arguments.count == 2:
        try DemoRecording.write(to: arguments[1])
    case "picture" where arguments.count == 2:
        try TrackBench.picture(to: arguments[1])
    case "track":
        try TrackBench.run(seeds: try positiveArgument(1, default: 5))
    case "gateway-batched":
        let broker = try TestBroker()
        print(String(format: "gateway, 10-fix batches: %.0f fix/s", try await Throughput.gatewayBatched(broker, count: count, batch: 10)))
    case "motion":
        try await MotionThroughput.run(count: count)
    case "uploader":
        try await UploaderBench.run(count: count)
    case "track-service":
        try await MotionThroughput.run(count: count, service: "track")
    case "sweep":
        try Sweep.run(seeds: try positiveArgument(1, default: 10))
    case "breakdown" where arguments.count >= 2:
        try Breakdown.run(variantName: arguments[1], seeds: try positiveArgument(2, default: 5))
    case "jump-floor":
        try JumpFloor.run(seeds: try positiveArgument(1, default: 40))
    case "trace" where arguments.count == 2:
        try Trace.run(path: arguments[1])
    case "motion-loop":
        try MotionLoop.run()
    case "geofence":
        try GeofenceBench.run(verbose: arguments.contains("-v"))
    case "http":
        try await HTTPBench.run(count: count)
    case "memory":
        try await MemoryBench.run(count: count, devices: try positiveArgument(2, default: 10_000))
    case "host":
        try HostBench.run(count: count, devices: try positiveArgument(2, default: 8))
    case "store":
        try StoreBench.run(count: count)
    case "filter-lag":
        // What the smoothing lag costs per fix: the same backlog with and without
        // Doppler (without, each fix waits in the device's saved state). CPU per
        // fix is the measure: the last ten seconds of each device are published
        // only after ten seconds of silence, which the rate includes.
        let broker = try TestBroker()
        for doppler in [true, false] {
            print(doppler ? "with Doppler:" : "without Doppler:")
            _ = try await Throughput.filterBacklog(broker, count: count, doppler: doppler)
        }
    case "filter-core":
        print(String(format: "FilterCore: %.0f fixes/s on one core", try Throughput.filterCore(iterations: 5_000_000)))
    case "all", "gateway", "filter":
        let broker = try TestBroker()
        // The ceiling swings between runs on a shared 2-core machine: take the median of three.
        var ceilings: [Double] = []
        for _ in 0..<3 { ceilings.append(try await Throughput.brokerCeiling(broker, count: count)) }
        let ceiling = ceilings.median
        print(String(format: "broker QoS 1 ceiling: %@ msg/s, median %.0f",
                     ceilings.map { String(format: "%.0f", $0) }.joined(separator: " / ") as NSString, ceiling))
        // A do-nothing relay over the same two hops: the most any service on this path can reach here.
        ratioLine("relay fixes→raw (no work)", try await Relay.measure(broker, count: count), ceiling)
        // Another build measured in the same run (TRACKER_BASELINE_BIN=DIR): before/after a change.
        let baseline = ProcessInfo.processInfo.environment["TRACKER_BASELINE_BIN"].map {
            Throughput.Variant(binaries: URL(fileURLWithPath: $0))
        }
        if arguments.first != "filter" {
            ratioLine("gateway fixes→raw", try await Throughput.gateway(broker, count: count), ceiling)
            // The hand-written JSON paths earn their code only if this line is clearly lower.
            ratioLine("gateway, Foundation JSON", try await Throughput.gateway(broker, count: count, variant: .foundationJSON), ceiling)
            if let baseline { ratioLine("gateway, baseline build", try await Throughput.gateway(broker, count: count, variant: baseline), ceiling) }
            // Not the issue's measure (that is one fix per message): what the
            // gateway does when devices batch, in fixes per second.
            ratioLine("gateway, 10-fix batches", try await Throughput.gatewayBatched(broker, count: count, batch: 10), ceiling, unit: "fix/s")
        }
        if arguments.first != "gateway" {
            // The filter's own do-nothing relay: raw in, a point and an event out for each.
            let relay = try await Relay.measureFilterHops(broker, count: count)
            ratioLine("relay raw→points+events", relay, ceiling)
            let filter = try await Throughput.filter(broker, count: count)
            ratioLine("filter raw→verdict", filter, ceiling)
            print(String(format: "  filter against its relay: %.2f", filter / relay))
            ratioLine("filter, Foundation JSON", try await Throughput.filter(broker, count: count, variant: .foundationJSON), ceiling)
            if let baseline { ratioLine("filter, baseline build", try await Throughput.filter(broker, count: count, variant: baseline), ceiling) }
            ratioLine("filter catching up a backlog", try await Throughput.filterBacklog(broker, count: count), ceiling)
            if let baseline {
                ratioLine("filter backlog, baseline build", try await Throughput.filterBacklog(broker, count: count, variant: baseline), ceiling)
            }
        }
        if arguments.first == "all" {
            print(String(format: "FilterCore: %.0f fixes/s on one core", try Throughput.filterCore(iterations: 5_000_000)))
            try Quality.run(seeds: [1, 2, 3, 4, 5])
        }
    case nil:
        print(usage)
    default:
        throw TestSupportError("cannot read '\(arguments.joined(separator: " "))'; \(usage)")
    }
} catch {
    FileHandle.standardError.write(Data("tracker-bench: \(error)\n".utf8))
    exit(1)
}
