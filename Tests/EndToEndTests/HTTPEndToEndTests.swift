import Bus
import Foundation
import Model
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// curl as Traccar Client, OwnTracks in HTTP mode and an API consumer.
struct Curl {
    let directory: URL

    struct Answer: CustomStringConvertible {
        var status: Int
        var body: String
        var headers: String
        var json: Any? { try? JSONSerialization.jsonObject(with: Data(body.utf8)) }
        var code: String? { (json as? [String: Any])?["code"] as? String }
        var description: String { "\(status) \(body.prefix(400))" }
    }

    func callAsFunction(_ arguments: [String]) throws -> Answer {
        let tag = UUID().uuidString.prefix(8)
        let body = directory.appendingPathComponent("curl-\(tag).body"), headers = directory.appendingPathComponent("curl-\(tag).headers")
        let process = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-s", "-S", "--max-time", "20", "-o", body.path, "-D", headers.path,
                                                                                  "-w", "%{http_code}"] + arguments,
                                       logFile: directory.appendingPathComponent("curl-\(tag).log").path)
        guard process.wait(timeout: 30) != nil else { throw TestSupportError("curl \(arguments) did not end") }
        let status = Int(process.log.suffix(3)) ?? 0
        return Answer(status: status, body: (try? String(contentsOf: body, encoding: .utf8)) ?? "",
                      headers: (try? String(contentsOf: headers, encoding: .utf8)) ?? "")
    }
}

extension HeavySuites {
    /// tracker-http beside the whole constellation, on the product's broker
    /// config and ACL: the broker's accounts are its gate.
    @Suite(.serialized) struct HTTPEndToEndTests {
        static let accounts = Dictionary(uniqueKeysWithValues: ["devA", "devB", "jane", "tracker-http"].map { ($0, "pw-\($0)-\(UUID().uuidString.prefix(8))") })

        struct Running {
            let constellation: Constellation
            let http: ServiceHarness
            let base: String
            let curl: Curl
            func stop() { http.stop(); constellation.stop() }
            func user(_ login: String) -> [String] { ["-u", "\(login):\(constellation.passwords[login]!)"] }
        }

        static func start(_ settings: [String: Any] = [:], extraAccounts: [String: String] = [:], aclFile: String? = nil,
                          services: [String: [String: Any]] = [:]) async throws -> Running {
            let constellation = try Constellation(logins: true, config: services, accounts: accounts.merging(extraAccounts) { $1 }, aclFile: aclFile)
            try await constellation.start()
            let port = try freeListenerPort()
            var config: [String: Any] = ["httpHost": "127.0.0.1", "httpPort": Int(port), "gatePort": Int(constellation.broker.gatePort),
                                         "operatorPort": Int(constellation.broker.operatorPort), "healthIntervalSec": 0.2]
            for (key, value) in settings { config[key] = value }
            let http = try ServiceHarness(executable: "tracker-http", broker: constellation.broker, config: config,
                                          environment: ["TRACKER_MQTT_USERNAME": "tracker-http", "TRACKER_MQTT_PASSWORD": accounts["tracker-http"]!])
            try http.start()
            try await constellation.waitOnline(["http"])
            return Running(constellation: constellation, http: http, base: "http://127.0.0.1:\(port)", curl: Curl(directory: constellation.broker.directory))
        }

        @Test func traccarClientsFixesArriveAsTheAccountAndTheACLDecides() async throws {
            let run = try await Self.start()
            defer { run.stop() }
            let raw = try await run.constellation.collector(["tracker/devA/raw"])
            let now = Int(Date().timeIntervalSince1970)
            // As Traccar Client (Android) sends it: POST, everything in the query; speed in knots.
            let sent = try run.curl(run.user("devA") + ["-X", "POST",
                "\(run.base)/?id=devA&timestamp=\(now)&lat=48.137&lon=11.575&speed=10&bearing=90&altitude=520&accuracy=6&batt=81"])
            #expect(sent.status == 200, "\(sent)")
            // The Flutter app's JSON body: ISO time, m/s, battery 0…1.
            let json = #"{"location":{"timestamp":"\#(ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(now + 1))))","coords":{"latitude":48.1371,"longitude":11.575,"accuracy":5,"speed":5.2,"heading":91,"altitude":521},"battery":{"level":0.8,"is_charging":false}},"device_id":"devA"}"#
            let flutter = try run.curl(run.user("devA") + ["-H", "Content-Type: application/json", "--data", json, "\(run.base)/"])
            #expect(flutter.status == 200, "\(flutter)")
            try await raw.wait(count: 2, topicSuffix: "/raw")
            let fixes = raw.decoded(RawFix.self, topicSuffix: "/raw")
            #expect(fixes[0].timeMs == Int64(now) * 1000 && abs((fixes[0].speedMps ?? 0) - 5.14444) < 1e-4 && fixes[0].courseDeg == 90)
            #expect(fixes[0].altitudeM == 520 && fixes[0].accuracyM == 6 && fixes[0].batteryPct == 81)
            #expect(fixes[1].speedMps == 5.2 && fixes[1].batteryPct == 80 && fixes[1].altitudeM == 521)
            // Another device's fixes: the ACL refuses devA, and tracker-http says so.
            let other = try run.curl(run.user("devA") + ["-X", "POST", "\(run.base)/?id=devB&timestamp=\(now)&lat=48.1&lon=11.5"])
            #expect(other.status == 403 && other.code == "forbidden", "\(other)")
            // A map page's account only reads; an operator may send a device's fixes.
            let byMap = try run.curl(run.user("tracker-map") + ["-X", "POST", "\(run.base)/?id=devA&timestamp=\(now + 5)&lat=48.1&lon=11.5"])
            #expect(byMap.status == 403 && byMap.code == "forbidden", "\(byMap)")
            #expect(try await Self.mqttAllowed("tracker-map", "tracker/devA/fixes", run) == false)
            // A plain device name without credentials is no credential.
            let anonymous = try run.curl(["-X", "POST", "\(run.base)/?id=devA&timestamp=\(now)&lat=48.1&lon=11.5"])
            #expect(anonymous.status == 401 && anonymous.code == "unauthorized" && anonymous.headers.contains("WWW-Authenticate: Basic"), "\(anonymous)")
            // Bad input: a clear 400, nothing forwarded.
            for query in ["id=devA&lat=north&lon=11.5", "id=devA&lon=11.5", "lat=1&lon=2", "id=devA&lat=1&lon=2&timestamp=yesterday"] {
                let bad = try run.curl(run.user("devA") + ["\(run.base)/?\(query)"])
                #expect(bad.status == 400 && bad.code == "badInput", "\(query): \(bad)")
            }
            #expect(raw.messages.count == 2)
            await raw.close()
        }

        /// Traccar Client sends no password: a token from `trackerctl accounts add token` is its device identifier.
        @Test func anIngestTokenIsTheOnlyCredentialTraccarClientNeeds() async throws {
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("token-accounts-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            try FileManager.default.copyItem(at: Repository.root.appendingPathComponent("config/acl"), to: dir.appendingPathComponent("acl"))
            let issue = try ChildProcess(executable: ServiceHarness.binaryDirectory.appendingPathComponent("trackerctl").path,
                                         arguments: ["accounts", "--dir", dir.path, "add", "token", "devA"], logFile: dir.appendingPathComponent("issue.log").path)
            #expect(issue.wait(timeout: 30) == 0, "\(issue.log)")
            let token = try #require(issue.log.split(separator: "\n").first { $0.hasPrefix("devA~") }.map(String.init), "\(issue.log)")
            let secret = String(token.dropFirst("devA~".count))
            let run = try await Self.start(extraAccounts: ["ingest.devA": secret], aclFile: dir.appendingPathComponent("acl").path)
            defer { run.stop() }
            let raw = try await run.constellation.collector(["tracker/devA/raw", "tracker/devB/raw"])
            let now = Int(Date().timeIntervalSince1970)
            let sent = try run.curl(["-X", "POST", "\(run.base)/?id=\(token)&timestamp=\(now)&lat=48.1&lon=11.5&accuracy=5"])
            #expect(sent.status == 200, "\(sent)")
            try await raw.wait(count: 1, topicSuffix: "/raw")
            // A wrong secret, a token of a device that has none, the device's name alone: the same answer.
            let wrong = try run.curl(["-X", "POST", "\(run.base)/?id=devA~\(String(repeating: "x", count: 32))&timestamp=\(now + 1)&lat=48.1&lon=11.5"])
            let unknown = try run.curl(["-X", "POST", "\(run.base)/?id=devB~\(secret)&timestamp=\(now + 1)&lat=48.1&lon=11.5"])
            let plain = try run.curl(["-X", "POST", "\(run.base)/?id=devA&timestamp=\(now + 1)&lat=48.1&lon=11.5"])
            for answer in [wrong, unknown, plain] { #expect(answer.status == 401 && answer.body == wrong.body, "\(answer)") }
            // The token reads nothing through the API either.
            let read = try run.curl(["-u", "ingest.devA:\(secret)", "\(run.base)/api/v1/devices/devA/sessions"])
            #expect(read.status == 403, "\(read)")
            #expect(raw.messages.count == 1)
            // Revoked (its login gone from the password file, the broker told): the next request is refused,
            // though tracker-http held an open session for it (the broker closes that connection).
            let revoke = try ChildProcess(executable: "/usr/bin/mosquitto_passwd", arguments: ["-D", run.constellation.broker.directory.appendingPathComponent("passwords").path, "ingest.devA"],
                                          logFile: run.constellation.broker.directory.appendingPathComponent("revoke.log").path)
            #expect(revoke.wait(timeout: 10) == 0, "\(revoke.log)")
            run.constellation.broker.reload()
            let deadline = ContinuousClock.now + .seconds(20)
            var after = try run.curl(["-X", "POST", "\(run.base)/?id=\(token)&timestamp=\(now + 2)&lat=48.1&lon=11.5"])
            // A publish in flight when the broker closes the revoked login's connection answers 503 (try again): then 401.
            while after.status == 200 || after.status == 503, ContinuousClock.now < deadline {
                after = try run.curl(["-X", "POST", "\(run.base)/?id=\(token)&timestamp=\(now + 2)&lat=48.1&lon=11.5"])
            }
            #expect(after.status == 401, "a revoked token still works: \(after)")
            await raw.close()
        }

        @Test func theAPIReadsAsTheAccountAndTheSameCasesHoldOverMQTT() async throws {
            let run = try await Self.start()
            defer { run.stop() }
            let now = Int(Date().timeIntervalSince1970)
            for device in ["devA", "devB"] {
                for i in 0..<3 {
                    let fix = try run.curl(run.user(device) + ["-X", "POST", "\(run.base)/?id=\(device)&timestamp=\(now + i)&lat=\(48.1 + Double(i) * 0.0001)&lon=11.5&speed=2&accuracy=5"])
                    #expect(fix.status == 200, "\(fix)")
                }
            }
            let ctl = try await run.constellation.operatorClient()
            try await Replay.waitCount(of: "devA", 1, with: ctl)
            try await Replay.waitCount(of: "devB", 1, with: ctl)
            // Each case: (account, path, HTTP status); over MQTT the same account's command is allowed or refused alike.
            let cases: [(String, String, Int, String?)] = [
                ("devA", "devices/devA/sessions", 200, "getSessions"), ("devA", "devices/devB/sessions", 403, "getSessions"),
                ("devA", "devices/devA/trips", 200, "getTrips"), ("devA", "devices/devB/geofences", 403, "getGeofences"),
                ("tracker-map", "devices/devB/sessions", 200, "getSessions"), ("tracker-map", "devices/devB/trips", 403, "getTrips"),
                ("trackerctl", "devices/devB/trips", 200, "getTrips"), ("trackerctl", "devices/devA/stops", 200, "getStops"),
            ]
            for (account, path, status, command) in cases {
                let answer = try run.curl(run.user(account) + ["\(run.base)/api/v1/\(path)"])
                #expect(answer.status == status, "\(account) \(path): \(answer)")
                if status == 403 { #expect(answer.code == "forbidden") }
                guard let command else { continue }
                let device = path.split(separator: "/")[1]
                let mqtt = try await Self.mqttAllowed(account, "tracker/\(device)/cmd/\(command)", run)
                #expect(mqtt == (status == 200), "\(account) over MQTT \(device) \(command): \(mqtt)")
            }
            // The live frames the account may read: devA only itself; the map page every device.
            let mine = try run.curl(run.user("devA") + ["\(run.base)/api/v1/devices"])
            #expect(mine.status == 200 && ((mine.json as? [[String: Any]])?.compactMap { $0["device"] as? String } ?? []) == ["devA"], "\(mine)")
            let all = try run.curl(run.user("tracker-map") + ["\(run.base)/api/v1/devices"])
            #expect(((all.json as? [[String: Any]])?.compactMap { $0["device"] as? String } ?? []) == ["devA", "devB"], "\(all)")
            let frame = try run.curl(run.user("devA") + ["\(run.base)/api/v1/devices/devA"])
            #expect(frame.status == 200 && (frame.json as? [String: Any])?["latitude"] != nil, "\(frame)")
            let hidden = try run.curl(run.user("devA") + ["\(run.base)/api/v1/devices/devB"])
            #expect(hidden.status == 404 && hidden.code == "notFound", "\(hidden)")
            // A built track in each format.
            let sessions = try run.curl(run.user("devA") + ["\(run.base)/api/v1/devices/devA/sessions"])
            let session = try #require((sessions.json as? [[String: Any]])?.first?["id"] as? String, "\(sessions)")
            let gpx = try run.curl(run.user("devA") + ["\(run.base)/api/v1/devices/devA/sessions/\(session)/track.gpx"])
            #expect(gpx.status == 200 && gpx.body.contains("<gpx") && gpx.headers.contains("application/gpx+xml"), "\(gpx)")
            let geojson = try run.curl(run.user("devA") + ["\(run.base)/api/v1/devices/devA/sessions/\(session)/track?format=geojson"])
            #expect(geojson.status == 200 && geojson.body.contains("FeatureCollection"), "\(geojson)")
            let unknown = try run.curl(run.user("devA") + ["\(run.base)/api/v1/devices/devA/sessions/nope/track"])
            #expect(unknown.status == 404 && unknown.code == "notFound", "\(unknown)")
            await ctl.disconnect()
        }

        /// With the live frames not retained (`retainLiveFrames` off) the API
        /// answers as with them: the track service's frames, each account
        /// the ones it may read.
        @Test func liveFramesNotRetainedAreServedAsTheAccountMayReadThem() async throws {
            let run = try await Self.start(services: ["track": ["retainLiveFrames": false]])
            defer { run.stop() }
            let now = Int(Date().timeIntervalSince1970)
            for device in ["devA", "devB"] {
                let fix = try run.curl(run.user(device) + ["-X", "POST", "\(run.base)/?id=\(device)&timestamp=\(now)&lat=48.1&lon=11.5&accuracy=5"])
                #expect(fix.status == 200, "\(fix)")
            }
            let ctl = try await run.constellation.operatorClient()
            for device in ["devA", "devB"] { try await Replay.waitCount(of: device, 1, with: ctl) }
            let mine = try run.curl(run.user("devA") + ["\(run.base)/api/v1/devices"])
            #expect(mine.status == 200 && ((mine.json as? [[String: Any]])?.compactMap { $0["device"] as? String } ?? []) == ["devA"], "\(mine)")
            let all = try run.curl(run.user("tracker-map") + ["\(run.base)/api/v1/devices"])
            #expect(((all.json as? [[String: Any]])?.compactMap { $0["timeMs"] as? Int } ?? []) == [now * 1000, now * 1000], "\(all)")
            let frame = try run.curl(run.user("devB") + ["\(run.base)/api/v1/devices/devB"])
            #expect(frame.status == 200 && (frame.json as? [String: Any])?["latitude"] as? Double == 48.1, "\(frame)")
            let hidden = try run.curl(run.user("devA") + ["\(run.base)/api/v1/devices/devB"])
            #expect(hidden.status == 404 && hidden.code == "notFound", "\(hidden)")
            await ctl.disconnect()
        }

        /// With the track service down, the frames the subscription brought
        /// are served: after one wait for `getLive` (said once in the log),
        /// not one a request.
        @Test func retainedFramesAreServedWhileTheTrackServiceIsDown() async throws {
            let run = try await Self.start(["commandTimeoutSec": 1])
            defer { run.stop() }
            let frames = try await run.constellation.collector(["tracker/devA/live"])
            let fix = try run.curl(run.user("devA") + ["-X", "POST", "\(run.base)/?id=devA&timestamp=\(Int(Date().timeIntervalSince1970))&lat=48.1&lon=11.5&accuracy=5"])
            #expect(fix.status == 200, "\(fix)")
            _ = try await frames.wait(description: "devA's live frame") { !$0.isEmpty }
            await frames.close()
            _ = run.constellation.services["track"]?.stop()
            for _ in 0..<3 {
                let all = try run.curl(run.user("tracker-map") + ["\(run.base)/api/v1/devices"])
                #expect(all.status == 200 && ((all.json as? [[String: Any]])?.compactMap { $0["device"] as? String } ?? []) == ["devA"], "\(all)")
            }
            let said = run.http.log.components(separatedBy: "live frames (getLive) could not be read").count - 1
            #expect(said == 1, "\(run.http.log.suffix(2_000))")
        }

        /// Whether the broker lets `account` publish `topic` (QoS 1, v5: a refusal is a PUBACK 0x87).
        static func mqttAllowed(_ account: String, _ topic: String, _ run: Running) async throws -> Bool {
            let operatorAccount = account == "trackerctl"
            let client = try MQTTClient(MQTTOptions(port: operatorAccount ? run.constellation.broker.operatorPort : run.constellation.broker.port,
                                                    clientID: "\(account)-probe-\(UUID().uuidString.prefix(6))", username: account,
                                                    password: run.constellation.passwords[account]))
            try await client.connect(timeout: .seconds(5))
            defer { Task { await client.disconnect() } }
            do {
                try await client.publishAndWait(MQTTMessage(topic: topic, payload: Array(#"{"id":"probe"}"#.utf8)), timeout: .seconds(5))
                return true
            } catch MQTTError.publishRefused {
                return false
            }
        }

        /// docs/openapi.json is the routes: each operation, with its documented examples, answers 200.
        @Test func everyRouteInTheOpenAPIDocumentAnswers() async throws {
            let run = try await Self.start()
            defer { run.stop() }
            let now = Int(Date().timeIntervalSince1970)
            for i in 0..<3 {
                _ = try run.curl(run.user("devA") + ["-X", "POST", "\(run.base)/?id=devA&timestamp=\(now - 10 + i)&lat=\(48.1 + Double(i) * 0.0001)&lon=11.5&accuracy=5"])
            }
            let ctl = try await run.constellation.operatorClient()
            try await Replay.waitCount(of: "devA", 1, with: ctl)
            await ctl.disconnect()
            let sessions = try run.curl(run.user("trackerctl") + ["\(run.base)/api/v1/devices/devA/sessions"])
            let session = try #require((sessions.json as? [[String: Any]])?.first?["id"] as? String, "\(sessions)")
            let document = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: Repository.root.appendingPathComponent("docs/openapi.json"))) as? [String: Any])
            let paths = try #require(document["paths"] as? [String: [String: Any]])
            func fill(_ text: String) -> String {
                text.replacingOccurrences(of: "{now}", with: "\(now)").replacingOccurrences(of: "{nowMs}", with: "\(now * 1000 + 1000)")
                    .replacingOccurrences(of: "{dayAgoMs}", with: "\(now * 1000 - 86_400_000)")
                    .replacingOccurrences(of: "{session}", with: session)
            }
            var answered = 0
            for (path, operations) in paths.sorted(by: { $0.key < $1.key }) {
                for (method, value) in operations.sorted(by: { $0.key < $1.key }) {
                    guard let operation = value as? [String: Any] else { continue }
                    var url = path, query: [String] = [], headers: [String] = []
                    for parameter in operation["parameters"] as? [[String: Any]] ?? [] {
                        guard let name = parameter["name"] as? String, let example = (parameter["example"] as? String).map(fill) else { continue }
                        switch parameter["in"] as? String {
                        case "path": url = url.replacingOccurrences(of: "{\(name)}", with: example)
                        case "query": query.append("\(name)=\(example.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? example)")
                        case "header": headers += ["-H", "\(name): \(example)"]
                        default: break
                        }
                    }
                    var arguments = run.user(operation["x-account"] as? String ?? "trackerctl") + headers + ["-X", method.uppercased()]
                    if let body = ((operation["requestBody"] as? [String: Any])?["content"] as? [String: [String: Any]])?["application/json"]?["example"] {
                        let text = fill(String(decoding: try JSONSerialization.data(withJSONObject: body), as: UTF8.self)).replacingOccurrences(of: "\"\(now)\"", with: "\(now)")
                        arguments += ["-H", "Content-Type: application/json", "--data", text]
                    }
                    if path == "/api/v1/events" { arguments = ["--max-time", "2"] + arguments }
                    let answer = try run.curl(arguments + ["\(run.base)\(url)" + (query.isEmpty ? "" : "?" + query.joined(separator: "&"))])
                    #expect(answer.status == 200, "\(method.uppercased()) \(url): \(answer)")
                    answered += 1
                }
            }
            #expect(answered == 17, "every operation in docs/openapi.json was asked")
        }

        @Test func hostileRequestsGetAClear4xxAndStallNobody() async throws {
            let run = try await Self.start(["maxBodyBytes": 2048, "requestTimeoutSec": 1])
            defer { run.stop() }
            // No credentials, wrong ones: 401; after five wrong ones from this address, 429 — and the account still logs in over MQTT.
            #expect(try run.curl(["\(run.base)/api/v1/devices"]).status == 401)
            var statuses: [Int] = []
            for _ in 0..<6 { statuses.append(try run.curl(["-u", "devA:wrong", "\(run.base)/api/v1/devices"]).status) }
            #expect(statuses == [401, 401, 401, 401, 401, 429], "\(statuses)")
            let stillThere = try MQTTClient(MQTTOptions(port: run.constellation.broker.port, clientID: "devA", username: "devA",
                                                        password: run.constellation.passwords["devA"]))
            try await stillThere.connect(timeout: .seconds(5))
            await stillThere.disconnect()
            // A body over the limit, path traversal, a bad device id, an unknown route, a wrong method, a bad query.
            let big = String(repeating: "x", count: 10_000)
            let tooLarge = try run.curl(run.user("devB") + ["--data", "id=devB&lat=1&lon=2&pad=\(big)", "\(run.base)/"])
            #expect(tooLarge.status == 413 && tooLarge.code == "badInput", "\(tooLarge) \(tooLarge.headers)")
            let traversal = try run.curl(run.user("devB") + ["--path-as-is", "\(run.base)/api/v1/devices/../../../etc/passwd"])
            #expect(traversal.status == 404 && traversal.code == "notFound", "\(traversal)")
            let badID = try run.curl(run.user("devB") + ["\(run.base)/api/v1/devices/bad%20id!"])
            #expect(badID.status == 400 && badID.code == "badInput", "\(badID)")
            #expect(try run.curl(run.user("devB") + ["\(run.base)/api/v2/nothing"]).status == 404)
            #expect(try run.curl(run.user("devB") + ["-X", "DELETE", "\(run.base)/api/v1/devices"]).status == 405)
            let badQuery = try run.curl(run.user("devB") + ["\(run.base)/api/v1/devices/devB/trips?from=yesterday"])
            #expect(badQuery.status == 400 && badQuery.code == "badInput", "\(badQuery)")
            let unknownParameter = try run.curl(run.user("devB") + ["\(run.base)/api/v1/devices/devB/trips?evil=1"])
            #expect(unknownParameter.status == 400, "\(unknownParameter)")
            // A client that never finishes its request is closed after requestTimeoutSec; others are served meanwhile.
            let port = Int32(run.base.split(separator: ":").last!)!
            let slow = try #require(LoopbackSocket())
            #expect(slow.connect(port))
            _ = slow.send("GET /api/v1/devices HTTP/1.1\r\nHost: x\r\n")
            #expect(try run.curl(run.user("devB") + ["\(run.base)/health"]).status == 200)
            let start = ContinuousClock.now
            let read = slow.receive(timeout: 10)  // 0: the server closed it (a 408 first is fine too)
            #expect(read >= 0 && ContinuousClock.now - start < .seconds(8), "read \(read) after \(ContinuousClock.now - start)")
        }

        @Test func ownTracksInHTTPModeTakesTheMQTTPathAndGetsItsFriends() async throws {
            let run = try await Self.start()
            defer { run.stop() }
            let raw = try await run.constellation.collector(["tracker/jane.phone/raw"])
            let now = Int(Date().timeIntervalSince1970)
            let location = #"{"_type":"location","lat":48.137,"lon":11.575,"acc":8,"tst":\#(now),"tid":"JP"}"#
            let posted = try run.curl(run.user("jane") + ["-H", "X-Limit-U: jane", "-H", "X-Limit-D: phone", "-H", "Content-Type: application/json",
                                                          "--data", location, "\(run.base)/pub"])
            #expect(posted.status == 200 && posted.json is [Any], "\(posted)")
            try await raw.wait(count: 1, topicSuffix: "/raw")
            // Another user's topic is the ACL's to refuse.
            let other = try run.curl(run.user("jane") + ["-H", "X-Limit-U: bob", "-H", "X-Limit-D: phone", "--data", location, "\(run.base)/pub"])
            #expect(other.status == 403, "\(other)")
            let noDevice = try run.curl(run.user("jane") + ["--data", location, "\(run.base)/pub"])
            #expect(noDevice.status == 400, "\(noDevice)")
            await raw.close()
        }

        @Test func eventsStreamWhatTheAccountMayRead() async throws {
            let run = try await Self.start()
            defer { run.stop() }
            let log = run.constellation.broker.directory.appendingPathComponent("sse.log")
            let stream = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-s", "-N", "--max-time", "30"] + run.user("devA")
                                            + ["\(run.base)/api/v1/events"], logFile: log.path)
            defer { stream.kill(SIGTERM); _ = stream.wait(timeout: 5) }
            let now = Int(Date().timeIntervalSince1970)
            let deadline = ContinuousClock.now + .seconds(30)
            var i = 0
            // Fixes of both devices until devA's location events show in the stream (the stream may open after the first).
            while ContinuousClock.now < deadline, !stream.log.contains("event: location") {
                for device in ["devA", "devB"] {
                    _ = try run.curl(run.user(device) + ["-X", "POST", "\(run.base)/?id=\(device)&timestamp=\(now + i)&lat=\(48.1 + Double(i) * 0.0002)&lon=11.5&speed=3&accuracy=5"])
                }
                i += 1
            }
            #expect(stream.log.contains("event: location") && stream.log.contains(#""device":"devA""#), "\(stream.log.prefix(2000))")
            #expect(!stream.log.contains(#""device":"devB""#), "devB's events reached devA's stream")
            // The stream drops; events go on; a reconnect with Last-Event-ID gets exactly what it missed.
            stream.kill(SIGTERM)
            _ = stream.wait(timeout: 5)
            let seen = Self.eventIDs(stream.log)
            let last = try #require(seen.last)
            for k in 0..<3 {
                _ = try run.curl(run.user("devA") + ["-X", "POST", "\(run.base)/?id=devA&timestamp=\(now + i + k)&lat=\(48.1 + Double(i + k) * 0.0002)&lon=11.5&speed=3&accuracy=5"])
            }
            let resumedLog = run.constellation.broker.directory.appendingPathComponent("sse-resumed.log")
            let resumed = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-s", "-N", "--max-time", "30", "-H", "Last-Event-ID: \(last)"] + run.user("devA")
                                             + ["\(run.base)/api/v1/events"], logFile: resumedLog.path)
            defer { resumed.kill(SIGTERM); _ = resumed.wait(timeout: 5) }
            let resumeDeadline = ContinuousClock.now + .seconds(20)
            while ContinuousClock.now < resumeDeadline, Self.eventIDs(resumed.log).count < 3, resumed.wait(timeout: 0.2) == nil {}
            let again = Self.eventIDs(resumed.log)
            #expect(again.first == last + 1 && again == Array(again.first!...(again.last ?? 0)), "resumed after \(last): \(again)")
            // A number this session never gave: said, not silently skipped.
            let foreign = try run.curl(["--max-time", "2", "-H", "Last-Event-ID: 987654"] + run.user("devA") + ["\(run.base)/api/v1/events"])
            #expect(foreign.body.contains("event: notResumed"), "\(foreign.body.prefix(300))")
        }

        /// The `id:` lines of a Server-Sent Events log, in order.
        static func eventIDs(_ log: String) -> [Int] {
            log.split(separator: "\n").compactMap { $0.hasPrefix("id: ") ? Int($0.dropFirst(4)) : nil }
        }
    }
}
