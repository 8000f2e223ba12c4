import Bus
import Foundation
import Synchronization
import Model
import Runtime

/// `trackerctl`: the command line for people and scripts.
@main
struct Ctl {
    static let usage = """
        usage: trackerctl <command> [options]
          replay FILE --device ID [--speed N] [--rebase]   publish a JSON Lines or GPX recording
          events [--device D] [--json] [--count N] [--timeout S] [--except TYPE,…]
                                                           print events as they arrive (but those types)
          cmd DEVICE NAME [JSON-ARGS] [--timeout S] [--v311] send a command, print the reply
          health [--wait S] [--check SERVICE [--instance ID]]
                                                           table of every service's health; with --check,
                                                           exit 0 only if SERVICE is online and fresh (a container health check):
                                                           partitioned, its live instances run every partition, or ID does
          render DEVICE --session ID --out FILE.svg [--options JSON]
                                                           draw a built track (PNG beside it with rsvg-convert)
          view DEVICE --session ID --out FILE.html [--tiles URL]
                                                           the map's view of a day as one file that opens offline
          accounts [--dir DIR] add|remove|list …           the broker's password files and ACL (no broker needed;
                                                           trackerctl accounts help)
        common: --host H --port P --prefix P (or TRACKER_MQTT_HOST, TRACKER_MQTT_PORT, TRACKER_TOPIC_PREFIX);
                logins: TRACKER_MQTT_USERNAME, TRACKER_MQTT_PASSWORD or TRACKER_MQTT_PASSWORD_FILE
        """

    static func main() async {
        // Files only: no connection options, no broker.
        if CommandLine.arguments.dropFirst().first == "accounts" { AccountsCommand.main(Array(CommandLine.arguments.dropFirst(2))) }
        var args = Arguments(Array(CommandLine.arguments.dropFirst()))
        do {
            // Connection options first, so `--port 1884 health` works too.
            let connection = try Connection(&args)
            guard let command = args.positional() else { fail(usage, code: 64) }
            switch command {
            case "replay": try await replay(&args, connection)
            case "events": try await events(&args, connection)
            case "cmd": try await cmd(&args, connection)
            case "health": try await health(&args, connection)
            case "render": try await render(&args, connection)
            case "view": try await view(&args, connection)
            case "help", "--help", "-h": print(usage)
            default: fail("unknown command '\(command)'\n\(usage)", code: 64)
            }
        } catch let error as UsageError {
            fail("trackerctl: \(error.message)\n\(usage)", code: 64)
        } catch {
            fail("trackerctl: \(error)", code: 1)
        }
    }

    static func fail(_ message: String, code: Int32) -> Never {
        FileHandle.standardError.write(Data((message + "\n").utf8))
        exit(code)
    }

    // MARK: replay

    static func replay(_ args: inout Arguments, _ connection: Connection) async throws {
        let deviceValue = args.value("--device")
        let speedValue = args.value("--speed")
        let rebase = args.flag("--rebase")
        guard let path = args.positional() else { throw UsageError("replay needs a FILE") }
        guard let deviceText = deviceValue else { throw UsageError("replay needs --device ID") }
        guard let device = DeviceID(deviceText) else { throw UsageError("--device: '\(deviceText)' is not a valid device id") }
        let speedText = speedValue ?? "1"
        guard let speed = Double(speedText), speed >= 0, speed.isFinite else {
            throw UsageError("--speed: expected a number ≥ 0, got '\(speedText)'")
        }
        var recording = try Recording.load(path: path)
        if rebase { recording = try recording.rebased(to: Date().timeIntervalSince1970) }
        try args.finish()

        let client = try await connection.connect()
        let topic = connection.topics.fixes(device)
        // A GPX file of several tracks: each track its own session, tagged with its name.
        let sessionStarts = recording.tracks.count > 1 ? Dictionary(recording.trackStarts.map { ($0.line, $0.tag) }) { a, _ in a } : [:]
        let responseTopic = "\(connection.topics.prefix)/_ctl/\(client.options.clientID)/reply"
        if !sessionStarts.isEmpty { try await client.subscribe([responseTopic]) }
        let clock = ContinuousClock()
        let started = clock.now
        let firstT = recording.lines.compactMap(\.t).first
        let failures = FailureCount()
        for (i, line) in recording.lines.enumerated() {
            if let tag = sessionStarts[i] {
                // The fixes before it first, then the new session, then its fixes.
                await client.drain(timeout: .seconds(60))
                var request = CommandRequest(id: .string(UUID().uuidString.lowercased()))
                request.args = .object(["tag": .string(tag)])
                let reply = try await client.request(MQTTMessage(topic: connection.topics.command(device, "start"), payload: JSONCoding.bytes(request)),
                                                     responseTopic: responseTopic, timeout: .seconds(10))
                let decoded = try JSONCoding.decoder.decode(CommandReply.self, from: Data(reply.payload))
                guard decoded.ok else { fail("trackerctl: the gateway refused a session for track '\(tag)': \(decoded.code ?? "?"): \(decoded.message ?? "no reason")", code: 1) }
            }
            if speed > 0, let t = line.t, let firstT {
                let due = started + .milliseconds(Int64((t - firstT) / speed * 1000))
                if due > clock.now { try await clock.sleep(until: due) }
            }
            // Keep the in-flight window bounded so a fast replay does not balloon memory.
            try await client.publish(inFlightBelow: 2_000, MQTTMessage(topic: topic, payload: Array(line.payload.utf8))) { result in
                if case .failure = result { failures.add() }
            }
        }
        await client.drain(timeout: .seconds(60))
        let unacknowledged = client.inFlight + failures.value
        await client.disconnect()
        let elapsed = clock.now - started
        guard unacknowledged == 0 else {
            fail("trackerctl: \(unacknowledged) fix(es) not acknowledged by the broker", code: 1)
        }
        print("replayed \(recording.lines.count) fixes to \(topic) in \(elapsed.formatted(.units(allowed: [.seconds], fractionalPart: .show(length: 2))))")
    }

    // MARK: events

    static func events(_ args: inout Arguments, _ connection: Connection) async throws {
        let device = args.value("--device")
        let json = args.flag("--json")
        let count = try args.int("--count")
        let timeout = try args.double("--timeout")
        let skipped = Set((args.value("--except") ?? "").split(separator: ",").map(String.init))
        try args.finish()
        if let device, DeviceID(allowingReserved: device) == nil { throw UsageError("--device: '\(device)' is not a valid device id") }
        let client = try await connection.connect(name: "events")
        let stream = client.messages()
        try await client.subscribe([device.map { "\(connection.topics.prefix)/\($0)/events" } ?? connection.topics.allEvents])
        if let timeout {
            Task { try await Task.sleep(for: .milliseconds(Int64(timeout * 1000))); exit(count == nil ? 0 : 3) }
        }
        var seen = 0
        for await message in stream {
            // One it cannot read (another version's) is printed raw below, never dropped.
            let event = try? JSONCoding.decoder.decode(Event.self, from: Data(message.payload))
            if let event, skipped.contains(event.type) { continue }
            if json {
                print(message.string)
            } else if let event {
                print(EventText.line(event))
            } else {
                print("? \(message.topic) \(message.string)")
            }
            fflush(nil)
            seen += 1
            if let count, seen >= count { break }
        }
        await client.disconnect()
    }

    // MARK: cmd

    static func cmd(_ args: inout Arguments, _ connection: Connection) async throws {
        // Options first, so their values are never taken for positionals.
        let timeout = try args.double("--timeout") ?? 10
        let v311 = args.flag("--v311")
        guard let deviceText = args.positional(), let name = args.positional() else {
            throw UsageError("cmd needs DEVICE and NAME")
        }
        guard let device = DeviceID(allowingReserved: deviceText) else { throw UsageError("'\(deviceText)' is not a valid device id") }
        var request = CommandRequest(id: .string(UUID().uuidString.lowercased()))
        if let argsText = args.positional() {
            let value: JSONValue
            do { value = try JSONCoding.decoder.decode(JSONValue.self, from: Data(argsText.utf8)) } catch {
                throw UsageError("JSON-ARGS is not valid JSON (\(DecodingErrorText.describe(any: error))): \(argsText)")
            }
            guard case .object = value else { throw UsageError("JSON-ARGS must be a JSON object, got \(argsText)") }
            request.args = value
        }
        try args.finish()
        let client = try await connection.connect(name: "cmd", protocolVersion: v311 ? .v311 : .v5)
        let payload = JSONCoding.bytes(request)
        let topic = connection.topics.command(device, name)
        let reply: MQTTMessage
        do {
            if v311 {
                // MQTT 3.1.1 has no response topic: the reply comes on tracker/{device}/reply/{name} with our id.
                let stream = client.messages()
                try await client.subscribe([connection.topics.reply(device, name)])
                try client.publish(MQTTMessage(topic: topic, payload: payload))
                let requestID = request.id
                reply = try await first(in: stream, timeout: timeout) { message in
                    // An unreadable reply is not the one it waits for; it keeps waiting until the timeout.
                    (try? JSONCoding.decoder.decode(CommandReply.self, from: Data(message.payload)))?.id == requestID
                }
            } else {
                let responseTopic = "\(connection.topics.prefix)/_ctl/\(client.options.clientID)/reply"
                try await client.subscribe([responseTopic])
                reply = try await client.request(MQTTMessage(topic: topic, payload: payload), responseTopic: responseTopic,
                                                  timeout: .milliseconds(Int64(timeout * 1000)))
            }
        } catch MQTTError.timedOut {
            fail("trackerctl: no reply to \(name) for \(device) within \(timeout) s (is the service running?)", code: 3)
        }
        await client.disconnect()
        let decoded = try JSONCoding.decoder.decode(CommandReply.self, from: Data(reply.payload))
        let pretty = JSONEncoder()
        pretty.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        print(String(decoding: try pretty.encode(decoded), as: UTF8.self))
        if !decoded.ok { exit(1) }
    }

    /// The first message that matches, or a timeout. The stream is ours alone, so ending it is fine.
    static func first(in stream: AsyncStream<MQTTMessage>, timeout: Double,
                      where match: @escaping @Sendable (MQTTMessage) -> Bool) async throws -> MQTTMessage {
        try await withThrowingTaskGroup(of: MQTTMessage?.self) { group in
            group.addTask { for await m in stream where match(m) { return m }; return nil }
            group.addTask { try await Task.sleep(for: .milliseconds(Int64(timeout * 1000))); return nil }
            defer { group.cancelAll() }
            guard let result = try await group.next(), let message = result else {
                throw MQTTError.timedOut(operation: "reply")
            }
            return message
        }
    }

    // MARK: health

    static func health(_ args: inout Arguments, _ connection: Connection) async throws {
        let wait = try args.double("--wait") ?? 1
        let check = args.value("--check")
        let instance = args.value("--instance")
        try args.finish()
        let client = try await connection.connect(name: "health")
        let collected = HealthBox()
        let unreadable = FailureCount()
        client.setHandler { message in
            do { collected.add(try JSONCoding.decoder.decode(Health.self, from: Data(message.payload)), topic: message.topic) } catch { unreadable.add() }
        }
        // A partitioned service's instances each have their own: tracker/_health/{service}/{instance}.
        try await client.subscribe([connection.topics.allHealth, connection.topics.allHealth + "/+"])
        // Retained messages arrive right after the subscription; give them a moment.
        try await Task.sleep(for: .milliseconds(Int64(wait * 1000)))
        await client.disconnect()
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let rows = collected.all.sorted { ($0.service, $0.instance ?? "") < ($1.service, $1.instance ?? "") }
        if unreadable.value > 0 {
            FileHandle.standardError.write(Data("trackerctl: \(unreadable.value) health message(s) could not be read (another version's?)\n".utf8))
        }
        func isLive(_ h: Health) -> Bool {
            h.status == .online && Double(now - h.timeMs) <= 2 * Double(h.intervalMs ?? 5_000) + 1_000
        }
        if let check {
            let named = rows.filter { $0.service == check && (instance == nil || $0.instance == instance) }
            // A partitioned service's instances answer for it (a health of its unpartitioned past may linger, retained).
            let partitioned = instance == nil && named.contains { $0.partitionCount != nil }
            // One instance, or (partitioned) the one named.
            if !partitioned, let h = named.first {
                let age = Double(now - h.timeMs) / 1000, interval = Double(h.intervalMs ?? 5_000) / 1000
                guard isLive(h) else {
                    fail("\(check): \(h.status.rawValue), last heard \(Int(age)) s ago (interval \(interval) s)", code: 1)
                }
                print("\(check): online, heard \(String(format: "%.1f", age)) s ago")
                return
            }
            // A partitioned service as a whole: its live instances run every partition, and one the ingress.
            guard let count = named.compactMap(\.partitionCount).first else { fail("\(check): no health published", code: 1) }
            let live = named.filter(isLive)
            let owned = Set(live.flatMap { $0.partitions ?? [] })
            guard owned.count == count, live.contains(where: { $0.ingress == true }) else {
                fail("\(check): \(live.count) instance(s) online run \(owned.count) of \(count) partitions"
                     + (live.contains { $0.ingress == true } ? "" : ", none the ingress"), code: 1)
            }
            print("\(check): online, \(live.count) instance(s) running all \(count) partitions")
            return
        }
        if rows.isEmpty { print("no service has published health under \(connection.topics.prefix)/_health/"); exit(1) }
        // LAG_MS counts from the gateway's receipt of the newest fix; FIX_AGE from the fix's own time (a replay's is old).
        print("SERVICE    STATUS   INSTANCE                 VERSION  PROCESSED  ERRORS  LAG_MS    QUEUE  AGE_S  FIX_AGE         NOTE")
        for h in rows {
            let age = Double(now - h.timeMs) / 1000
            let interval = Double(h.intervalMs ?? 5_000) / 1000
            let stale = h.status == .online && age > 2 * interval + 1
            let share = h.partitions.map { "partitions \($0.count)/\(h.partitionCount ?? 0)" + (h.ingress == true ? " + ingress " : " ") } ?? ""
            let note = share + (stale ? "STALE: not heard from for \(Int(age)) s (interval \(interval) s)" : (h.note ?? ""))
            func pad(_ s: String, _ n: Int) -> String { s.count >= n ? s + " " : s + String(repeating: " ", count: n - s.count) }
            print(pad(h.service, 11) + pad(h.status.rawValue, 9) + pad(h.instance ?? "-", 25) + pad(h.version, 9)
                  + String(format: "%9lld %7lld %7lld %8lld %6.1f  ", h.processed, h.errors, h.lagMs, h.queueDepth, age)
                  + pad(h.fixAgeMs.map(Self.fixAge) ?? "-", 15) + note)
        }
    }

    /// `2.1 s`, `14 min`, `3.2 h`; past an hour, `replay, 412 d`: a recording's fixes, not a live phone's.
    static func fixAge(_ ms: Int64) -> String {
        let s = Double(ms) / 1000
        let text = s < 120 ? String(format: "%.1f s", s) : s < 7_200 ? String(format: "%.0f min", s / 60)
            : s < 172_800 ? String(format: "%.1f h", s / 3_600) : String(format: "%.0f d", s / 86_400)
        return ms >= Health.replayAgeMs ? "replay, " + text : text
    }
}

/// A formatted, one-line view of an event.
enum EventText {
    static func line(_ e: Event) -> String {
        let time = Date(timeIntervalSince1970: Double(e.timeMs) / 1000)
        let stamp = time.formatted(.iso8601.time(includingFractionalSeconds: true))
        let detail: String
        switch e.body {
        case .location(let p):
            detail = String(format: "#%lld %.6f,%.6f ±%.0f m odometer %.1f m", p.seq, p.latitude, p.longitude, p.accuracyM, p.odometerM)
        case .locationRejected(let d): detail = "#\(d.seq) \(d.reason)"
        case .sessionStarted(let s): detail = "session \(s.id) tag \(s.tag ?? "-")"
        case .sessionStopped(let s): detail = "session \(s.id) ended \(s.endMs.map(String.init) ?? "-")"
        case .trackingGap(let d, let m): detail = String(format: "%.0f s, %.0f m", d, m)
        case .diagnostic(let code, let message), .error(let code, let message): detail = "\(code): \(message)"
        case .streamGap(let gap): detail = "\(StreamGap.code): \(gap.message)"
        case .motionChange(let state, _): detail = state.rawValue
        case .activityChange(let activity, let confidence): detail = "\(activity) (\(confidence))"
        case .heartbeat(let p): detail = p.map { String(format: "%.6f,%.6f", $0.latitude, $0.longitude) } ?? "-"
        case .geofenceAdded(let f): detail = String(format: "%@ %.6f,%.6f r %.0f m", f.id, f.latitude, f.longitude, f.radiusM)
        case .geofenceRemoved(let id, _): detail = id
        case .geofence(let c): detail = c.geofenceID + (c.interpolated == true ? " (interpolated)" : "")
        case .tripEnded(let t): detail = String(format: "%.0f m in %.0f s", t.distanceM, t.durationSec ?? 0)
        case .stopEnded(let s): detail = String(format: "%.0f s at %.6f,%.6f", s.durationSec ?? 0, s.latitude, s.longitude)
        case .offRoute(_, let d), .onRoute(_, let d): detail = String(format: "%.0f m from the route", d)
        case .httpResponse(let status, let count): detail = "\(status.map(String.init) ?? "no answer"), \(count) point(s)"
        case .uploaded(let count): detail = "\(count) point(s)"
        case .retryScheduled(let after, let reason): detail = String(format: "in %.1f s: %@", after, reason as NSString)
        case .authExpired: detail = "uploads stopped until new credentials (configureSync)"
        case .other(_, let fields): detail = JSONCoding.string(JSONValue.object(fields))
        }
        return "\(stamp) \(e.device) \(e.type) \(detail)"
    }
}

final class FailureCount: Sendable {
    private let count = Mutex(0)
    func add() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}

/// The newest health of each service, or of each instance of a partitioned one.
final class HealthBox: Sendable {
    private let byTopic = Mutex<[String: Health]>([:])
    func add(_ h: Health, topic: String) { byTopic.withLock { $0[topic] = h } }
    var all: [Health] { byTopic.withLock { Array($0.values) } }
}
