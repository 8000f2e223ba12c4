import Bus
import Foundation
import Model
import TestSupport

/// `tracker-bench map-page [DEVICES] [SECONDS]`: the map page in headless
/// Chromium with DEVICES live devices each sending a frame a second (retained,
/// QoS 0, as the track service publishes them): the page's animation frames a
/// second and the time it takes to apply a frame's updates, measured in the page.
enum MapPageBench {
    static func run(devices: Int, seconds: Int) async throws {
        let root = Repository.root
        let broker = try TestBroker(webDirectory: root.appendingPathComponent("web").path)
        let publisher = try await TestClient.connect(port: broker.port)
        // Devices spread over a city, each driving its own circle.
        func frame(_ d: Int, second: Int) -> MQTTMessage {
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
            return MQTTMessage(topic: "tracker/car\(d)/live", payload: Array(JSONCoding.encode(live)), qos: .atMostOnce, retain: true)
        }
        for d in 0..<devices { try publisher.publish(frame(d, second: 0)) }
        let page = "http://127.0.0.1:\(broker.webPort!)/index.html#user=bench&password=bench"
        let script = root.appendingPathComponent("scripts/browser.py").path
        let browser = try ChildProcess(executable: "/usr/bin/python3", arguments: [
            script, page, "--wait", "#map[data-devices=\"\(devices)\"]", "--timeout", "\(seconds + 60)",
            "--eval", "window.trackerMapReset()",
            "--eval", "new Promise(r => setTimeout(r, \(seconds * 1000)))",
            "--eval", "JSON.stringify(window.trackerMapSummary())",
            "--screenshot", "/tmp/tracker-map-\(devices).png"], logFile: broker.directory.appendingPathComponent("browser.log").path)
        // A frame a second for every device while the page measures (and a little before and after).
        let start = ContinuousClock.now
        var second = 1
        while browser.wait(timeout: 0) == nil, ContinuousClock.now - start < .seconds(seconds + 90) {
            let due = start + .seconds(second)
            if due > ContinuousClock.now { try await Task.sleep(until: due, clock: .continuous) }
            for d in 0..<devices { try publisher.publish(frame(d, second: second)) }
            second += 1
        }
        _ = browser.wait(timeout: 30)
        let summary = browser.log.split(separator: "\n").last { $0.contains("ticksPerSecond") } ?? "no summary: \(browser.log)"
        print("map page, \(devices) devices, a frame a second each, over \(seconds) s: \(summary)")
        print("screenshot: /tmp/tracker-map-\(devices).png")
        await publisher.disconnect()
    }
}
