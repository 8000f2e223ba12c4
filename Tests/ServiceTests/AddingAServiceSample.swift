// The sample service of docs/adding-a-service.md. The region between the
// markers below is the page's code block, character for character (the last
// test checks it), so the page shows code that compiles and runs.

// sample:begin
import FoundationEssentials
import Model
import Runtime

/// The sample's device row: what it remembers of each device between
/// messages. The host stores it as one JSON document per device, in the
/// same savepoint as the message that changed it.
struct SpeedingRow: Codable, Equatable {
    /// Points in a row faster than the limit.
    var fastPoints = 0
    /// Whether this run of fast points was announced already.
    var announced = false
}

/// Its settings, read from `config/speeding.json` and the environment. An
/// unknown key, a wrong type or a value out of range stops the service at
/// start, naming the setting.
struct SpeedingSettings {
    var limitMps: Double
    var afterPoints: Int

    init(_ reader: SettingsReader) throws {
        limitMps = try reader.double("limitMps", default: 33, in: 1...100)
        afterPoints = try reader.int("afterPoints", default: 3, in: 1...1_000)
    }
}

/// Reads the filter's accepted points and says once, on the device's
/// events, when a device went faster than `limitMps` for `afterPoints`
/// points in a row.
enum SpeedingService {
    static func definition(_ settings: SpeedingSettings) -> ServiceDefinition<SpeedingRow> {
        ServiceDefinition(name: "speeding", migrations: [], rows: .json(fresh: { SpeedingRow() })) { _ in
            Routes(
                inputs: [
                    // An internal stream: the host applies each seq once per
                    // producer epoch and repairs gaps from the filter's log.
                    .sequenced("points", decode: { try JSONCoding.decoder.decode(PointMessage.self, from: Data($0)) }) { message, work in
                        let point = message.point
                        work.processed()
                        guard let speed = point.speedMps, speed > settings.limitMps else {
                            work.row = SpeedingRow()  // back under the limit
                            return
                        }
                        work.row.fastPoints += 1
                        guard work.row.fastPoints >= settings.afterPoints, !work.row.announced else { return }
                        work.row.announced = true
                        // Published once the batch is committed, never before.
                        work.emit(.diagnostic(code: "speeding", message: "\(speed) m/s for \(work.row.fastPoints) points"),
                                  timeMs: point.timeMs)
                        work.count("speeding")  // a health counter
                    },
                ],
                // Command names must equal CommandCatalog.owned(by: name): none here.
                commands: [])
        }
    }

    /// The executable's `main.swift` is this one call.
    static func main() async -> Int32 {
        await ServiceRunner.run(name: "speeding") { _, reader in definition(try SpeedingSettings(reader)) }
    }
}
// sample:end

import Bus
import TestSupport
import Testing

/// The sample on the real service host, in process, as the other host tests run services.
@Suite struct AddingAServiceSampleTests {
    let bus = RecordingBus()
    let clock = ManualClock()
    let database = TemporaryDatabase("speeding")
    let t0: Int64 = 1_790_000_000_000

    func point(_ seq: Int64, speed: Double) -> MQTTMessage {
        let p = TrackPoint(seq: seq, sessionID: "s1", timeMs: t0 + seq * 1_000, latitude: 48.1, longitude: 11.5 + Double(seq) * 0.0003,
                           accuracyM: 5, speedMps: speed, odometerM: Double(seq) * 20)
        return MQTTMessage(topic: "tracker/van1/points",
                           payload: JSONCoding.bytes(PointMessage(device: DeviceID("van1")!, point: p, epoch: "f1")))
    }

    func speedingEvents() -> [Event] {
        bus.events(topicSuffix: "tracker/van1/events")
            .filter { if case .diagnostic(let code, _) = $0.body { code == "speeding" } else { false } }
    }

    @Test func aRunOfFastPointsIsAnnouncedOnceAndARedeliveryChangesNothing() throws {
        let settings = try SpeedingSettings(.test(["limitMps": .number(30)]))
        let host = try ServiceHost.inProcess(SpeedingService.definition(settings), path: database.path, bus: bus, clock: clock)
        for (seq, speed) in [(1, 10.0), (2, 31), (3, 32), (4, 33), (5, 34), (6, 10)] { host.receive(point(Int64(seq), speed: speed)) }
        #expect(host.commit())
        // Announced on the third fast point, in the point's own time, and only once.
        #expect(speedingEvents().map(\.timeMs) == [t0 + 4_000])
        // The broker redelivers three fast points after a reconnect: the host
        // skips seqs already applied, so they do not count as a new run.
        bus.clear()
        for seq in 2...4 { host.receive(point(Int64(seq), speed: 40)) }
        #expect(host.commit())
        #expect(speedingEvents().isEmpty)
    }

    @Test func aSettingOutOfRangeIsRefusedByName() {
        #expect(throws: ConfigError.self) { try SpeedingSettings(.test(["limitMps": .number(0)])) }
    }

    /// docs/adding-a-service.md shows this file's sample, unchanged.
    @Test func thePageShowsThisFilesSample() throws {
        let page = try String(contentsOf: Repository.root.appendingPathComponent("docs/adding-a-service.md"), encoding: .utf8)
        let source = try String(contentsOf: Repository.root.appendingPathComponent("Tests/ServiceTests/AddingAServiceSample.swift"),
                                encoding: .utf8)
        let code = try #require(Self.region(of: source, from: "// sample:begin", to: "// sample:end"), "no sample region in this file")
        let block = try #require(Self.region(of: page, from: "<!-- sample:begin -->", to: "<!-- sample:end -->"), "no sample region in the page")
        let lines = block.split(separator: "\n", omittingEmptySubsequences: false)
        try #require(lines.count >= 2 && lines.first == "```swift" && lines.last == "```",
                     "the page's sample region must be one ```swift block")
        #expect(lines.dropFirst().dropLast().joined(separator: "\n") == code,
                "docs/adding-a-service.md's code block differs from Tests/ServiceTests/AddingAServiceSample.swift: copy the region between the markers")
    }

    /// The lines strictly between the line `begin` and the line `end`.
    static func region(of text: String, from begin: String, to end: String) -> String? {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        guard let start = lines.firstIndex(where: { $0 == begin }),
              let stop = lines[(start + 1)...].firstIndex(where: { $0 == end }) else { return nil }
        return lines[(start + 1)..<stop].joined(separator: "\n")
    }
}
