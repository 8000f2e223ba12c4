import Bus
import Foundation
import Model
import TestSupport
import Testing

/// The map page in a real browser (Debian's headless Chromium, driven over
/// the DevTools protocol by `scripts/browser.py`): served by the broker
/// itself, logged in with the map's read-only account, during a replay.
/// Every wait is for something in the page's DOM, with a deadline.
@Suite(.serialized) struct MapPageTests {
    static let device = "demo-van"
    static let screenshots = FileManager.default.temporaryDirectory.appendingPathComponent("tracker-map-screenshots")

    @Test func theLivePageShowsTheFleetAndADaysTrack() async throws {
        let constellation = try Constellation(logins: true, web: true)
        try await constellation.start()
        defer { constellation.stop() }
        let client = try await constellation.operatorClient()
        for line in try Fixtures.lines("demo-fences.jsonl") {
            let fence = try JSONCoding.decoder.decode(JSONValue.self, from: Data(line.utf8))
            #expect(try await TestClient.command(client, device: Self.device, "addGeofence", args: fence).ok)
        }
        let fixes = try Fixtures.lines("demo-drive.jsonl")
        try await Replay.publish(fixes, device: Self.device, with: client)
        try await constellation.waitJudged(Int64(fixes.count))

        let page = "http://127.0.0.1:\(constellation.broker.webPort!)/index.html"
            + "#user=tracker-map&password=\(constellation.passwords["tracker-map"]!)&device=\(Self.device)"
        try FileManager.default.createDirectory(at: Self.screenshots, withIntermediateDirectories: true)
        let shot = Self.screenshots.appendingPathComponent("live.png")
        let result = try Browser.run(page, waits: [#"#devices li[data-device="demo-van"]"#, "#map[data-track-moving]"],
                                     evaluations: ["JSON.stringify(Object.assign({}, document.querySelector('#map').dataset))",
                                                   "document.querySelector('#devices li[data-device=\"demo-van\"] .state').textContent"],
                                     screenshot: shot.path, in: constellation.broker.directory)
        #expect(result.status == 0, "\(result.output)")
        let dataset = try JSONSerialization.jsonObject(with: Data((result.values.first ?? "{}").utf8)) as? [String: String] ?? [:]
        #expect(Int(dataset["trackMoving"] ?? "") ?? 0 >= 1, "\(dataset)")
        #expect(Int(dataset["trackStops"] ?? "") ?? 0 >= 1, "\(dataset)")
        #expect(dataset["trackGaps"] == "1", "\(dataset)")
        #expect(dataset["devices"] == "1", "\(dataset)")
        #expect(["moving", "stopPending", "stationary"].contains(result.values.dropFirst().first ?? ""), "\(result.values)")
        let size = (try? FileManager.default.attributesOfItem(atPath: shot.path)[.size] as? Int) ?? 0
        #expect(size > 20_000, "screenshot \(size) bytes")
        await client.disconnect()
    }
}

/// `scripts/browser.py`: loads a page in headless Chromium, waits for CSS
/// selectors, evaluates expressions, takes a screenshot.
enum Browser {
    struct Result { var status: Int32?; var values: [String]; var output: String }

    static func run(_ url: String, waits: [String], evaluations: [String] = [], screenshot: String? = nil,
                    timeout: Double = 60, in directory: URL) throws -> Result {
        var arguments = [Constellation.root.appendingPathComponent("scripts/browser.py").path, url, "--timeout", "\(Int(timeout))"]
        for selector in waits { arguments += ["--wait", selector] }
        for expression in evaluations { arguments += ["--eval", expression] }
        if let screenshot { arguments += ["--screenshot", screenshot] }
        let log = directory.appendingPathComponent("browser-\(UUID().uuidString.prefix(6)).log")
        let process = try ChildProcess(executable: "/usr/bin/python3", arguments: arguments, logFile: log.path)
        let status = process.wait(timeout: timeout + 30)
        let output = process.log
        let values = output.split(separator: "\n").compactMap { line -> String? in
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], object["eval"] != nil else { return nil }
            if let text = object["value"] as? String { return text }
            return object["value"].map { "\($0)" }
        }
        return Result(status: status, values: values, output: output)
    }
}
