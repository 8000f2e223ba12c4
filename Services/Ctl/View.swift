import Bus
import Foundation
import Model

extension Ctl {
    /// `trackerctl view DEVICE --session ID --out FILE.html`: the map page's
    /// view of a day as one self-contained file — Leaflet, the drawing code
    /// and the built track, fences and crossings inline, so it opens offline
    /// and fetches nothing when viewed (no tiles unless `--tiles URL`).
    static func view(_ args: inout Arguments, _ connection: Connection) async throws {
        let tiles = args.value("--tiles")
        let day = try DayArguments(&args, command: "view", file: "FILE.html")
        try args.finish()
        let (device, sessionID, out) = (day.device, day.sessionID, day.out)
        let web = try WebAssets.locate()

        let client = try await connection.connect(name: "view")
        let ask = try await Asker(client: client, connection: connection, device: device, timeout: day.timeout)
        let track = try await ask("buildTrack", ["sessionID": .string(sessionID)])
        // Without the motion service the day is still drawn, and says it has no fences.
        func optional(_ name: String, _ args: [String: JSONValue]) async -> JSONValue {
            do { return try await ask(name, args, optional: true) } catch {
                FileHandle.standardError.write(Data("trackerctl: \(name): \(error); the view has no fences\n".utf8))
                return .array([])
            }
        }
        let fences = await optional("getGeofences", [:])
        let crossings = await optional("getGeofenceEvents", ["limit": .number(1_000)])
        await client.disconnect()

        let data = JSONCoding.string(JSONValue.object(["track": track, "fences": fences, "crossings": crossings,
                                                       "tiles": tiles.map { .string($0) } ?? .null]))
        let html = """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><title>\(device.rawValue) — \(sessionID)</title>
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <style>\(try web.read("vendor/leaflet/leaflet.css"))</style>
            <style>\(try web.read("map.css"))
            body { flex-direction: column; } header { padding: 8px 12px; border-bottom: 1px solid #ddd; background: #fafaf7; } main { flex: 1; }</style>
            </head><body>
            <header id="legend"></header>
            <main id="map"></main>
            <script>\(try web.read("vendor/leaflet/leaflet.js"))</script>
            <script>\(try web.read("track-layer.js"))</script>
            <script>
            const day = \(data.replacingOccurrences(of: "</", with: "<\\/"));
            // A view first: a fence circle's bounds need the map's projection.
            const map = L.map('map').setView([20, 0], 2);
            if (day.tiles) L.tileLayer(day.tiles, { maxZoom: 19 }).addTo(map);
            L.control.scale({ imperial: false }).addTo(map);
            TrackerTrack.showDay(map, day.track, day.fences, day.crossings, document.getElementById('legend'));
            </script>
            </body></html>
            """
        try html.write(toFile: out, atomically: true, encoding: .utf8)
        print("wrote \(out) (\(html.utf8.count / 1024) KB, opens offline)")
    }
}

/// Requests one device's services answer on trackerctl's reply topic.
struct Asker {
    let client: MQTTClient
    let connection: Connection
    let device: DeviceID
    let timeout: Double
    let responseTopic: String

    /// Subscribes to the reply topic, once for every request.
    init(client: MQTTClient, connection: Connection, device: DeviceID, timeout: Double) async throws {
        (self.client, self.connection, self.device, self.timeout) = (client, connection, device, timeout)
        responseTopic = "\(connection.topics.prefix)/_ctl/\(client.options.clientID)/reply"
        try await client.subscribe([responseTopic])
    }

    /// A reply's result. A refusal ends trackerctl (exit 1), no reply in time
    /// too (exit 3); for an optional answer both throw `AskFailure` instead.
    func callAsFunction(_ name: String, _ args: [String: JSONValue], optional: Bool = false) async throws -> JSONValue {
        let request = CommandRequest(id: .string(UUID().uuidString.lowercased()), args: .object(args))
        let reply: MQTTMessage
        do {
            reply = try await client.request(MQTTMessage(topic: connection.topics.command(device, name), payload: JSONCoding.bytes(request)),
                                             responseTopic: responseTopic, timeout: .milliseconds(Int64(timeout * 1000)))
        } catch MQTTError.timedOut {
            let message = "no reply to \(name) for \(device) within \(timeout) s (is its service running?)"
            if optional { throw AskFailure(description: message) }
            Ctl.fail("trackerctl: \(message)", code: 3)
        }
        let decoded = try JSONCoding.decoder.decode(CommandReply.self, from: Data(reply.payload))
        guard decoded.ok, let result = decoded.result else {
            let message = "\(name) refused: \(decoded.code ?? "?"): \(decoded.message ?? "")"
            if optional { throw AskFailure(description: message) }
            Ctl.fail("trackerctl: \(message)", code: 1)
        }
        return result
    }
}

/// An optional answer that did not come.
struct AskFailure: Error, CustomStringConvertible { let description: String }

/// Where the map page's files are: `TRACKER_WEB_DIR`, the checkout the
/// executable was built in, or an installed copy; Leaflet from the page's
/// vendor directory or Debian's libjs-leaflet.
struct WebAssets {
    let directory: URL

    static func locate() throws -> WebAssets {
        var candidates: [URL] = []
        if let dir = ProcessInfo.processInfo.environment["TRACKER_WEB_DIR"] { candidates.append(URL(fileURLWithPath: dir)) }
        // No /proc (not Linux): the path it was started by is the next best guess.
        let exe = URL(fileURLWithPath: (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0])
        // .build/<configuration>/trackerctl (or .build/<triple>/<configuration>/) inside the checkout.
        var up = exe.deletingLastPathComponent()
        for _ in 0..<4 {
            up.deleteLastPathComponent()
            candidates.append(up.appendingPathComponent("web"))
        }
        candidates += [URL(fileURLWithPath: "web"), URL(fileURLWithPath: "/usr/share/tracker/web")]
        guard let found = candidates.first(where: { FileManager.default.fileExists(atPath: $0.appendingPathComponent("track-layer.js").path) }) else {
            throw UsageError("the map page's files (track-layer.js) are not found; set TRACKER_WEB_DIR")
        }
        return WebAssets(directory: found)
    }

    func read(_ path: String) throws -> String {
        var url = directory.appendingPathComponent(path)
        if path.hasPrefix("vendor/leaflet/"), !FileManager.default.fileExists(atPath: url.path) {
            url = URL(fileURLWithPath: "/usr/share/javascript/leaflet").appendingPathComponent(String(path.dropFirst("vendor/leaflet/".count)))
        }
        do { return try String(contentsOf: url, encoding: .utf8) } catch {
            throw UsageError("cannot read \(url.path): \(error.localizedDescription) (run scripts/build-web, or install libjs-leaflet)")
        }
    }
}
