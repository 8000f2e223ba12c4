import Bus
import Foundation
import Model
import TestSupport
import Testing

extension HeavySuites {
    /// The map page in a real browser (Debian's headless Chromium, driven over
    /// the DevTools protocol by `scripts/browser.py`): served by the broker
    /// itself, logged in with the map's read-only account, during a replay.
    /// Every wait is for something in the page's DOM, with a deadline.
    @Suite(.serialized) struct MapPageTests {
        static let device = "demo-van"
        static let screenshots = FileManager.default.temporaryDirectory.appendingPathComponent("tracker-map-screenshots")

        /// The constellation with the map's listener and the demo's fences armed.
        func demo() async throws -> (Constellation, MQTTClient) {
            let constellation = try Constellation(logins: true, web: true)
            try await constellation.start()
            let client = try await constellation.operatorClient()
            try await Replay.armDemoFences(Self.device, with: client)
            return (constellation, client)
        }

        /// The same, with the demo drive replayed and judged.
        func replayedDemo() async throws -> (Constellation, MQTTClient) {
            let (constellation, client) = try await demo()
            let fixes = try Fixtures.lines("demo-drive.jsonl")
            try await Replay.publish(fixes, device: Self.device, with: client)
            try await constellation.waitJudged(Int64(fixes.count))
            return (constellation, client)
        }

        @Test func theLivePageShowsTheFleetAndADaysTrack() async throws {
            let (constellation, client) = try await demo()
            defer { constellation.stop() }
            // The page opens first; the drive is replayed while it watches.
            let page = "http://127.0.0.1:\(constellation.broker.webPort!)/index.html"
                + "#user=tracker-map&password=\(constellation.passwords["tracker-map"]!)&device=\(Self.device)"
            try FileManager.default.createDirectory(at: Self.screenshots, withIntermediateDirectories: true)
            let shot = Self.screenshots.appendingPathComponent("live.png")
            let browser = try Browser.start(page, waits: ["body[data-connected]", #"#devices li[data-device="demo-van"]"#, #"#map[data-track-gaps="1"]"#],
                                            evaluations: ["JSON.stringify(Object.assign({}, document.querySelector('#map').dataset))",
                                                          "document.querySelector('#devices li[data-device=\"demo-van\"] .state').textContent",
                                                          "document.querySelectorAll('#events li').length",
                                                          "document.querySelector('#devices li[data-device=\"demo-van\"] .age').textContent"],
                                            screenshot: shot.path, in: constellation.broker.directory)
            try await browser.wait(until: "body[data-connected]")
            let fixes = try Fixtures.lines("demo-drive.jsonl")
            try await Replay.publish(fixes, device: Self.device, with: client)
            let result = browser.finish()
            #expect(result.status == 0, "\(result.output)")
            let dataset = try JSONSerialization.jsonObject(with: Data((result.values.first ?? "{}").utf8)) as? [String: String] ?? [:]
            #expect(Int(dataset["trackMoving"] ?? "") ?? 0 >= 1, "\(dataset)")
            #expect(Int(dataset["trackStops"] ?? "") ?? 0 >= 2, "\(dataset)")
            #expect(dataset["trackGaps"] == "1", "\(dataset)")
            #expect(dataset["devices"] == "1", "\(dataset)")
            #expect(["moving", "stopPending", "stationary"].contains(result.values.dropFirst().first ?? ""), "\(result.values)")
            #expect(Int(result.values.dropFirst(2).first ?? "") ?? 0 >= 5, "the events the page saw: \(result.values)")
            // The demo drive is from 2020: the list gives the time since its last frame came and marks the replay,
            // not an age of thousands of hours.
            let age = result.values.dropFirst(3).first ?? ""
            #expect(age.contains("replay of 2020-02-07") && !age.contains(" h ·"), "the age shown: \(age)")
            let size = (try? FileManager.default.attributesOfItem(atPath: shot.path)[.size] as? Int) ?? 0
            #expect(size > 20_000, "screenshot \(size) bytes")
            await client.disconnect()
        }

        /// A fleet whose live frames are not retained (`retainLiveFrames`
        /// off): the broker holds no frame of the device, and a page opened
        /// after the drive still shows it, from the track service (`getLive`).
        @Test func aPageOpenedAfterTheDriveShowsFramesThatAreNotRetained() async throws {
            let constellation = try Constellation(logins: true, config: ["track": ["retainLiveFrames": false]], web: true)
            try await constellation.start()
            defer { constellation.stop() }
            let client = try await constellation.operatorClient()
            let fixes = try Fixtures.lines("demo-drive.jsonl")
            try await Replay.publish(fixes, device: Self.device, with: client)
            try await constellation.waitJudged(Int64(fixes.count))
            // What a subscriber gets now: no retained frame, whatever the broker kept (a marker after it).
            let live = try await constellation.collector(["tracker/+/live"])
            try await client.publishAndWait(MQTTMessage(topic: "tracker/zz-marker/live", string: "{}"))
            let seen = try await live.wait(description: "the marker") { $0.contains { $0.topic == "tracker/zz-marker/live" } }
            #expect(!seen.contains { $0.topic == "tracker/\(Self.device)/live" && !$0.payload.isEmpty }, "\(seen.map(\.topic))")
            await live.close()

            let page = "http://127.0.0.1:\(constellation.broker.webPort!)/index.html"
                + "#user=tracker-map&password=\(constellation.passwords["tracker-map"]!)"
            let result = try Browser.run(page, waits: ["body[data-fleet-loaded]", #"#devices li[data-device="demo-van"] .age:not(:empty)"#],
                                         evaluations: ["document.querySelector('#map').dataset.devices",
                                                       "document.querySelector('#devices li[data-device=\"demo-van\"] .age').textContent"],
                                         in: constellation.broker.directory)
            #expect(result.status == 0, "\(result.output)")
            #expect(result.values.first == "1", "\(result.values)")
            // Its age counts from its fix (the drive is from 2020), not from when the page asked.
            #expect((result.values.dropFirst().first ?? "").hasPrefix("since 2020-02-07"), "\(result.values)")
            await client.disconnect()
        }

        @Test func theViewFileOpensOffline() async throws {
            let (constellation, client) = try await replayedDemo()
            defer { constellation.stop() }
            let current = try await TestClient.command(client, device: Self.device, "currentSession")
            guard case .object(let session)? = current.result, case .string(let sessionID)? = session["id"] else {
                Issue.record("no session: \(current)"); return
            }
            // Every point stored before the track is built.
            let decisions = try await Replay.decisions(of: Self.device, with: client)
            try await Replay.waitCount(of: Self.device, decisions.filter(\.accepted).count, with: client)
            let file = constellation.broker.directory.appendingPathComponent("day.html")
            var environment = ProcessInfo.processInfo.environment
            environment.merge(["TRACKER_MQTT_PORT": "\(constellation.broker.operatorPort)", "TRACKER_MQTT_USERNAME": "trackerctl",
                               "TRACKER_MQTT_PASSWORD": constellation.passwords["trackerctl"]!]) { $1 }
            let view = try ChildProcess(executable: ServiceHarness.binaryDirectory.appendingPathComponent("trackerctl").path,
                                        arguments: ["view", Self.device, "--session", sessionID, "--out", file.path], environment: environment,
                                        logFile: constellation.broker.directory.appendingPathComponent("view.log").path)
            #expect(view.wait(timeout: 60) == 0, "\(view.log)")
            // The same day as a picture (`trackerctl render`, through the same request path).
            let svg = constellation.broker.directory.appendingPathComponent("day.svg")
            let render = try ChildProcess(executable: ServiceHarness.binaryDirectory.appendingPathComponent("trackerctl").path,
                                          arguments: ["render", Self.device, "--session", sessionID, "--out", svg.path], environment: environment,
                                          logFile: constellation.broker.directory.appendingPathComponent("render.log").path)
            #expect(render.wait(timeout: 60) == 0, "\(render.log)")
            #expect((try? String(contentsOf: svg, encoding: .utf8))?.contains("<svg") == true)
            let html = try String(contentsOf: file, encoding: .utf8)
            #expect(!html.contains("<script src") && !html.contains("<link"), "the file must fetch nothing")
            try? FileManager.default.removeItem(at: Self.screenshots.appendingPathComponent("day.html"))
            try? FileManager.default.copyItem(at: file, to: Self.screenshots.appendingPathComponent("day.html"))
            // The broker is gone and the browser offline: the file stands alone.
            constellation.stop()
            constellation.broker.stop()
            try FileManager.default.createDirectory(at: Self.screenshots, withIntermediateDirectories: true)
            let shot = Self.screenshots.appendingPathComponent("view.png")
            let result = try Browser.run(file.absoluteString, waits: ["#map[data-track-moving]", ".track-stop", ".track-gap"],
                                         evaluations: ["JSON.stringify(Object.assign({}, document.querySelector('#map').dataset))"],
                                         screenshot: shot.path, offline: true, in: constellation.broker.directory)
            #expect(result.status == 0, "\(result.output)")
            let dataset = try JSONSerialization.jsonObject(with: Data((result.values.first ?? "{}").utf8)) as? [String: String] ?? [:]
            #expect(Int(dataset["trackStops"] ?? "") ?? 0 >= 2 && dataset["trackGaps"] == "1", "\(dataset)")
            await client.disconnect()
        }
    }
}

/// `scripts/browser.py`: loads a page in headless Chromium, waits for CSS
/// selectors, evaluates expressions, takes a screenshot.
enum Browser {
    struct Result { var status: Int32?; var values: [String]; var output: String }

    static func run(_ url: String, waits: [String], evaluations: [String] = [], screenshot: String? = nil,
                    offline: Bool = false, timeout: Double = 60, in directory: URL) throws -> Result {
        try start(url, waits: waits, evaluations: evaluations, screenshot: screenshot, offline: offline, timeout: timeout, in: directory).finish()
    }

    /// Starts the browser; `finish` waits for it and reads what it found.
    static func start(_ url: String, waits: [String], evaluations: [String] = [], screenshot: String? = nil,
                      offline: Bool = false, timeout: Double = 60, in directory: URL) throws -> Running {
        var arguments = [Repository.root.appendingPathComponent("scripts/browser.py").path, url, "--timeout", "\(Int(timeout))"]
        for selector in waits { arguments += ["--wait", selector] }
        for expression in evaluations { arguments += ["--eval", expression] }
        if let screenshot { arguments += ["--screenshot", screenshot] }
        if offline { arguments.append("--offline") }
        let log = directory.appendingPathComponent("browser-\(UUID().uuidString.prefix(6)).log")
        let output = MessageLines(path: log.path)
        return Running(process: try ChildProcess(executable: "/usr/bin/python3", arguments: arguments, logFile: log.path),
                       output: output, timeout: timeout)
    }

    struct Running {
        let process: ChildProcess
        let output: MessageLines
        let timeout: Double

        /// Until the browser reports `selector` found (it prints a line per wait met), or it exits.
        func wait(until selector: String) async throws {
            let line = #"{"found": "\#(selector)"}"#
            let deadline = ContinuousClock.now + .seconds(timeout)
            while ContinuousClock.now < deadline {
                if output.contains(line) { return }
                if process.wait(timeout: 0) != nil { throw TestSupportError("the browser ended: \(process.log)") }
                await Task.yield()
            }
            throw TestSupportError("the browser did not find \(selector): \(process.log)")
        }

        func finish() -> Result {
            let status = process.wait(timeout: timeout + 30)
            let text = process.log
            let values = text.split(separator: "\n").compactMap { line -> String? in
                guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], object["eval"] != nil else { return nil }
                if let value = object["value"] as? String { return value }
                return object["value"].map { "\($0)" }
            }
            return Result(status: status, values: values, output: text)
        }
    }

    /// The browser's log, read as it grows.
    final class MessageLines: Sendable {
        let path: String
        init(path: String) { self.path = path }
        func contains(_ line: String) -> Bool {
            ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").contains { $0 == line }
        }
    }
}
