import Bus
import Foundation
import Model
import TestSupport
import Testing

/// `trackerctl` as users run it, against a gateway and a real broker.
@Suite(.serialized) struct CtlEndToEndTests {
    let broker: TestBroker
    let gateway: ServiceHarness

    init() throws {
        broker = try TestBroker()
        gateway = try .started("gateway", on: broker)
    }

    func ctl(_ arguments: [String]) throws -> (code: Int32?, output: String) {
        let log = broker.directory.appendingPathComponent("ctl-\(UUID().uuidString.prefix(6)).log").path
        let process = try ChildProcess(executable: ServiceHarness.binaryDirectory.appendingPathComponent("trackerctl").path,
                                       arguments: arguments + ["--port", "\(broker.port)"], logFile: log)
        let code = process.wait(timeout: 30)
        return (code, process.log)
    }

    @Test func replaysGPX() async throws {
        try await broker.waitUntilOnline("gateway")
        let gpx = broker.directory.appendingPathComponent("walk.gpx")
        try """
            <?xml version="1.0" encoding="UTF-8"?>
            <gpx version="1.1" creator="test"><trk><trkseg>
              <trkpt lat="48.1" lon="11.5"><ele>520</ele><time>2026-10-01T10:00:00Z</time><hdop>2</hdop></trkpt>
              <trkpt lat="48.1001" lon="11.5"><time>2026-10-01T10:00:01.500Z</time></trkpt>
              <trkpt lat="48.1002" lon="11.5"><time>2026-10-01T10:00:03Z</time></trkpt>
            </trkseg></trk></gpx>
            """.write(to: gpx, atomically: true, encoding: .utf8)
        let out = try await MessageCollector(port: broker.port, filters: ["tracker/gpx1/raw"])
        let run = try ctl(["replay", gpx.path, "--device", "gpx1", "--speed", "0"])
        #expect(run.code == 0, "\(run.output)")
        try await out.wait(count: 3, topicSuffix: "/raw")
        let raw = out.decoded(RawFix.self, topicSuffix: "/raw")
        #expect(raw.map(\.timeMs) == [1_790_848_800_000, 1_790_848_801_500, 1_790_848_803_000])  // 2026-10-01T10:00:00Z …
        #expect(raw[0].accuracyM == 10 && raw[0].altitudeM == 520)  // hdop 2 × 5 m
        #expect(raw[1].accuracyM == 10)  // no hdop: 10 m
    }

    /// A replayed recording reads as what it is: the gateway's lag is since the
    /// fixes arrived, and their age (two months) is marked `replay`.
    @Test func healthSaysAReplayIsAReplay() async throws {
        try await broker.waitUntilOnline("gateway")
        let run = try ctl(["replay", Fixtures.url("gpx/garmin-edge-1.1.gpx").path, "--device", "old1", "--speed", "0"])
        #expect(run.code == 0, "\(run.output)")
        let deadline = ContinuousClock.now + .seconds(30)
        var line = ""
        while ContinuousClock.now < deadline, !line.contains("replay, ") {
            let health = try ctl(["health", "--wait", "0.3"])
            line = health.output.split(separator: "\n").first { $0.hasPrefix("gateway ") }.map(String.init) ?? ""
        }
        #expect(line.contains("replay, ") && line.contains(" d "), "\(line)")
        let header = try ctl(["health", "--wait", "0.3"]).output.split(separator: "\n").first { $0.hasPrefix("SERVICE") } ?? ""
        #expect(header.contains("LAG_MS") && header.contains("FIX_AGE"))
        // LAG_MS: the column under its header, a few milliseconds, not the recording's age.
        let columns = line.split(separator: " ", omittingEmptySubsequences: true)
        #expect(columns.count > 6 && (Int(columns[6]) ?? .max) < 60_000, "\(line)")
    }

    /// Files as other tools write them (Fixtures/gpx/): extension speed and
    /// course reach the raw fixes; zone-less times are UTC and said once.
    @Test func replaysGPXFromOtherTools() async throws {
        try await broker.waitUntilOnline("gateway")
        let out = try await MessageCollector(port: broker.port, filters: ["tracker/garmin1/raw", "tracker/local1/raw"])
        let garmin = try ctl(["replay", Fixtures.url("gpx/garmin-edge-1.1.gpx").path, "--device", "garmin1", "--speed", "0"])
        #expect(garmin.code == 0 && garmin.output.contains("replayed 6 fixes"), "\(garmin.output)")
        let zoneless = try ctl(["replay", Fixtures.url("gpx/zoneless-times.gpx").path, "--device", "local1", "--speed", "0"])
        #expect(zoneless.code == 0, "\(zoneless.output)")
        #expect(zoneless.output.components(separatedBy: "read as UTC").count == 2, "\(zoneless.output)")  // once
        try await out.wait(count: 10, topicSuffix: "/raw")
        let raw = out.decoded(RawFix.self, topicSuffix: "/raw")
        let g = raw.filter { $0.device.rawValue == "garmin1" }, l = raw.filter { $0.device.rawValue == "local1" }
        #expect(g.map(\.speedMps) == [4.2, 4.21, 4.22, 4.4, 4.41, 4.42] && g.allSatisfy { $0.courseDeg == 45 || $0.courseDeg == 46.5 })
        #expect(l.map(\.timeMs) == [1_714_557_600_000, 1_714_557_601_250, 1_714_557_602_500, 1_714_557_603_000])  // 2024-05-01T10:00:00 as UTC
    }

    /// A file of several tracks: each track its own session, tagged with its name.
    @Test func eachGPXTrackIsASessionOfItsOwn() async throws {
        try await broker.waitUntilOnline("gateway")
        let run = try ctl(["replay", Fixtures.url("gpx/gpsbabel-1.0.gpx").path, "--device", "babel1", "--speed", "0"])
        #expect(run.code == 0, "\(run.output)")
        let client = try await TestClient.connect(port: broker.port)
        let reply = try await TestClient.command(client, device: "babel1", "getSessions")
        let tags = reply.result?.arrayValue?.compactMap { $0["tag"]?.stringValue } ?? []
        #expect(reply.ok && tags.sorted() == ["ACTIVE LOG", "ACTIVE LOG #2"], "\(reply)")
        await client.disconnect()
    }

    /// A route, or a track without times, is refused before anything is sent.
    @Test func aGPXThatIsNoRecordingFailsAndSaysWhy() throws {
        let route = try ctl(["replay", Fixtures.url("gpx/route-only.gpx").path, "--device", "r1", "--speed", "0"])
        #expect(route.code == 1 && route.output.contains("only a route (<rte>, 4 points)"), "\(route.output)")
        #expect(!route.output.contains("replayed"))
        let timeless = try ctl(["replay", Fixtures.url("gpx/timeless-track.gpx").path, "--device", "r1", "--speed", "0"])
        #expect(timeless.code == 1 && timeless.output.contains("has a <time>"), "\(timeless.output)")
    }

    @Test func rebaseShiftsTheRecordingToNow() async throws {
        try await broker.waitUntilOnline("gateway")
        let out = try await MessageCollector(port: broker.port, filters: ["tracker/rb1/raw"])
        let before = Int64(Date().timeIntervalSince1970 * 1000)
        let run = try ctl(["replay", Fixtures.url("city-run.jsonl").path, "--device", "rb1", "--speed", "0", "--rebase"])
        #expect(run.code == 0, "\(run.output)")
        try await out.wait(count: 30, topicSuffix: "/raw")
        let raw = out.decoded(RawFix.self, topicSuffix: "/raw")
        #expect(abs(raw[0].timeMs - before) < 10_000)
        let original = try Fixtures.fixes("city-run.jsonl")
        // Spacing kept (to the millisecond, allowing for rounding).
        #expect(abs((raw[29].timeMs - raw[0].timeMs) - (original[29].timeMs - original[0].timeMs)) <= 1)
    }

    @Test func cmdExitCodesTellTheOutcome() async throws {
        try await broker.waitUntilOnline("gateway")
        let ok = try ctl(["cmd", "c1", "currentSession", "--timeout", "5"])
        #expect(ok.code == 0 && ok.output.contains("\"ok\" : true"), "\(ok.output)")
        let refused = try ctl(["cmd", "c1", "stop", "--timeout", "5"])
        #expect(refused.code == 1 && refused.output.contains("notReady"), "\(refused.output)")
        let unanswered = try ctl(["cmd", "c1", "getPoints", "--timeout", "0.5"])  // the track service is not running
        #expect(unanswered.code == 3 && unanswered.output.contains("no reply"), "\(unanswered.output)")
        let badUsage = try ctl(["replay", "x.jsonl", "--device", "bad id"])
        #expect(badUsage.code == 64 && badUsage.output.contains("--device"), "\(badUsage.output)")
    }
}
