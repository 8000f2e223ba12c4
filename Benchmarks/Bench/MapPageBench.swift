import Bus
import Foundation
import Model
import TestSupport

/// `tracker-bench map-page [DEVICES] [SECONDS]`: the map page in headless
/// Chromium with DEVICES live devices each sending a frame a second (retained,
/// QoS 0, as the track service publishes them): the page's animation frames a
/// second and the time it takes to apply a frame's updates, measured in the
/// page — against the same page with no device, in the same run.
enum MapPageBench {
    static func run(devices: Int, seconds: Int) async throws {
        let broker = try TestBroker(webDirectory: Repository.root.appendingPathComponent("web").path)
        let publisher = try await TestClient.connect(port: broker.port)
        let idle = try await measure(broker, devices: 0, seconds: seconds) { _ in }
        let loaded = try await measure(broker, devices: devices, seconds: seconds) { second in
            for d in 0..<devices { try publisher.publish(frame(d, second: second)) }
        }
        print("map page, no devices (the baseline): \(idle)")
        print("map page, \(devices) devices, a frame a second each: \(loaded)")
        if let a = idle["ticksPerSecond"], let b = loaded["ticksPerSecond"] {
            print(String(format: "animation frames a second: %.1f against %.1f idle (%.2f of it), over %d s each", b, a, b / a, seconds))
        }
        print("screenshot: /tmp/tracker-map-\(devices).png")
        await publisher.disconnect()
    }

    /// One device's frame: devices spread over a city, each driving its own circle.
    static func frame(_ d: Int, second: Int) -> MQTTMessage {
        let centre = (48.10 + Double(d % 40) * 0.004, 11.50 + Double(d / 40) * 0.006)
        let angle = Double(second) * 0.05 + Double(d)
        let lat = centre.0 + 0.001 * cos(angle), lon = centre.1 + 0.0015 * sin(angle)
        let tail = (1...8).map { k -> [Double] in
            let a = angle - Double(k) * 0.05
            return [centre.0 + 0.001 * cos(a), centre.1 + 0.0015 * sin(a)]
        }
        let live = LiveFrame(device: DeviceID("car\(d)")!, timeMs: Int64(Date().timeIntervalSince1970 * 1000), latitude: lat, longitude: lon,
                             accuracyM: 8, speedMps: 9, headingDeg: (angle * 180 / .pi + 90).truncatingRemainder(dividingBy: 360),
                             motion: d % 7 == 0 ? .stationary : .moving, tail: tail.reversed(), session: nil)
        return MQTTMessage(topic: "tracker/car\(d)/live", payload: JSONCoding.bytes(live), qos: .atMostOnce, retain: true)
    }

    /// Opens the page once `devices` are drawn, measures for `seconds` while
    /// `publish(second)` runs every second, and returns the page's summary.
    static func measure(_ broker: TestBroker, devices: Int, seconds: Int,
                        publish: (Int) throws -> Void) async throws -> [String: Double] {
        try publish(0)
        let page = "http://127.0.0.1:\(broker.webPort!)/index.html#user=bench&password=bench"
        let ready = devices > 0 ? "#map[data-devices=\"\(devices)\"]" : "body[data-connected]"
        let browser = try ChildProcess(executable: "/usr/bin/python3", arguments: [
            Repository.root.appendingPathComponent("scripts/browser.py").path, page, "--wait", ready, "--timeout", "\(seconds + 60)",
            "--eval", "window.trackerMapReset()",
            "--eval", "new Promise(r => setTimeout(r, \(seconds * 1000)))",
            "--eval", "JSON.stringify(window.trackerMapSummary())",
            "--screenshot", "/tmp/tracker-map-\(devices).png"], logFile: broker.directory.appendingPathComponent("browser-\(devices).log").path)
        // A frame a second for every device while the page measures (and a little before and after).
        let start = ContinuousClock.now
        var second = 1
        while browser.wait(timeout: 0) == nil, ContinuousClock.now - start < .seconds(seconds + 90) {
            let due = start + .seconds(second)
            if due > ContinuousClock.now { try await Task.sleep(until: due, clock: .continuous) }
            try publish(second)
            second += 1
        }
        _ = browser.wait(timeout: 30)
        guard let line = browser.log.split(separator: "\n").last(where: { $0.contains("ticksPerSecond") }),
              let outer = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
              let inner = (outer["value"] as? String).flatMap({ try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Double] })
        else { throw TestSupportError("no summary from the page: \(browser.log)") }
        return inner
    }
}
