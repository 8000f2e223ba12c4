import Bus
import Foundation
import Model
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

extension HeavySuites {
    /// Hostile accounts against the whole constellation on the product's own
    /// broker configuration (`config/mosquitto-logins.conf`, `config/acl`):
    /// no account can stall, rob or read past another.
    @Suite(.serialized) struct TrustBoundaryTests {
        static let accounts = Dictionary(uniqueKeysWithValues: ["devA", "devB", "owner", "owner2", "tracker-map-2"].map { ($0, "pw-\($0)-\(UUID().uuidString.prefix(8))") })

        /// The product's ACL with a second map page, made as `config/acl` says: the same lines under its own name.
        static func aclWithSecondPage() throws -> String {
            let acl = try String(contentsOf: Repository.root.appendingPathComponent("config/acl"), encoding: .utf8)
            let lines = acl.split(separator: "\n", omittingEmptySubsequences: false)
            guard let start = lines.firstIndex(of: "user tracker-map") else { throw TestSupportError("config/acl has no 'user tracker-map'") }
            let block = lines[start...].prefix { !$0.isEmpty && !$0.hasPrefix("#") }
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("acl-\(UUID().uuidString.prefix(8))").path
            try (acl + "\n" + block.map { $0 == "user tracker-map" ? "user tracker-map-2" : String($0) }.joined(separator: "\n") + "\n")
                .write(toFile: path, atomically: true, encoding: .utf8)
            return path
        }

        static func start(_ config: [String: [String: Any]] = [:]) async throws -> Constellation {
            let constellation = try Constellation(logins: true, config: config, accounts: accounts, aclFile: try aclWithSecondPage())
            try await constellation.start()
            return constellation
        }

        /// A device or page account on the listener its kind uses (the broker names the connection after it).
        static func login(_ account: String, _ constellation: Constellation, v311: Bool = false) async throws -> MQTTClient {
            let client = try MQTTClient(MQTTOptions(port: constellation.broker.port, clientID: "\(account)-\(UUID().uuidString.prefix(6))",
                                                    username: account, password: constellation.passwords[account],
                                                    protocolVersion: v311 ? .v311 : .v5))
            try await client.connect(timeout: .seconds(5))
            return client
        }

        func fix(_ t: Double) -> String { #"{"t":\#(t),"lat":48.1,"lon":11.5,"acc":8,"speed":2}"# }

        /// Waits for a reply to `name` on the device's own reply topic; returns how long it took.
        static func timedCommand(_ client: MQTTClient, device: String, _ name: String) async throws -> (CommandReply, Duration) {
            let start = ContinuousClock.now
            let reply = try await TestClientAs.command(client, device: device, name)
            return (reply, ContinuousClock.now - start)
        }

        @Test func aFloodOfRepliesAimedAnywhereStallsNoServiceForAnotherDevice() async throws {
            let constellation = try await Self.start()
            defer { constellation.stop() }
            let a = try await Self.login("devA", constellation)
            let refusals = try await MessageCollector(port: constellation.broker.operatorPort, filters: ["tracker/devA/reply/#"],
                                                      clientID: "trackerctl-refusals", username: "trackerctl",
                                                      password: constellation.passwords["trackerctl"])
            // 300 commands to itself, for every service, each asking for its reply where it may not go.
            let names = ["currentSession", "getDecisions", "getGeofences", "getPoints", "noSuchCommand"]
            let targets = ["evil/x", "$SYS/broker/x", "tracker/devB/reply/stolen", "tracker/devB/events", "tracker/devA/raw"]
            for i in 0..<300 {
                let request = JSONCoding.bytes(CommandRequest(id: .string("flood-\(i)")))
                try a.publish(MQTTMessage(topic: "tracker/devA/cmd/\(names[i % names.count])", payload: request,
                                          responseTopic: targets[(i / names.count) % targets.count], correlationData: Array("c\(i)".utf8)))
            }
            await a.drain(timeout: .seconds(10))
            // Each is refused, on devA's own reply topic: 300 answers, none lost.
            try await refusals.wait(timeout: 30, description: "300 refusals") { $0.count >= 300 }
            let codes = Set(refusals.messages.compactMap { try? JSONCoding.decoder.decode(CommandReply.self, from: Data($0.payload)).code })
            #expect(codes == ["badInput"], "\(codes)")
            // Another device is answered by every service within a second.
            let b = try await Self.login("devB", constellation)
            var answered: [String] = []
            for name in ["currentSession", "getDecisions", "getGeofences", "getCount"] {
                let (reply, took) = try await Self.timedCommand(b, device: "devB", name)
                #expect(reply.ok, "\(name): \(reply)")
                #expect(took < .seconds(1), "\(name) answered devB after \(took)")
                answered.append("\(name) \(took.milliseconds) ms")
            }
            print("after the 300-command flood, devB answered: \(answered.joined(separator: ", "))")
            // The uploader answers no device: an operator asks it.
            let ctl = try await constellation.operatorClient()
            let start = ContinuousClock.now
            let sync = try await TestClient.command(ctl, device: "_fleet", "configureSync", args: .object(["url": .string(constellation.sinkURL)]))
            #expect(sync.ok, "\(sync)")
            #expect(ContinuousClock.now - start < .seconds(1), "the uploader answered after \(ContinuousClock.now - start)")
            // Nothing was published where the broker refuses it.
            for service in Constellation.services {
                let health = try await constellation.waitHealth(service, description: "\(service) health") { _ in true }
                #expect(health.counters?["denied"] == nil, "\(service): \(health.counters ?? [:])")
            }
            // The stores are the services' alone: data directories 0700, files 0600.
            for service in Constellation.services {
                let dir = constellation.services[service]!.dataDir.path
                #expect(Self.mode(dir) == 0o700, "\(service): \(dir) is \(String(Self.mode(dir), radix: 8))")
                for file in try FileManager.default.contentsOfDirectory(atPath: dir) where file.contains(".sqlite") {
                    #expect(Self.mode("\(dir)/\(file)") == 0o600, "\(service): \(file) is \(String(Self.mode("\(dir)/\(file)"), radix: 8))")
                }
            }
            await refusals.close()
            await ctl.disconnect()
            await a.disconnect()
            await b.disconnect()
        }

        /// A deployment that lets replies go below `evil/` while the broker's ACL
        /// does not: the broker refuses each one, and that must be final. With
        /// `max_queued_messages 0` mosquitto 2.0.11 dropped the connection after each
        /// refusal and the client resent the refused reply forever (see
        /// docs/broker-restarts.md); the product's config must not bring that back.
        @Test
        func aPublishTheBrokerRefusesIsCountedNeverResentAndStallsNothing() async throws {
            let constellation = try await Self.start(["track": ["replyTopicPrefixes": "evil"]])
            defer { constellation.stop() }
            let a = try await Self.login("devA", constellation)
            for i in 0..<100 {
                try a.publish(MQTTMessage(topic: "tracker/devA/cmd/getCount", payload: JSONCoding.bytes(CommandRequest(id: .string("r\(i)"))),
                                          responseTopic: "evil/x", correlationData: [UInt8(i)]))
            }
            await a.drain(timeout: .seconds(10))
            let refused: Health
            do {
                refused = try await constellation.waitHealth("track", timeout: 30, description: "100 refusals counted") { ($0.counters?["denied"] ?? 0) >= 100 }
            } catch {
                Issue.record("\(error); track's log: \(constellation.services["track"]!.log.suffix(3_000)); broker: \(constellation.broker.log.suffix(2_000))")
                return
            }
            #expect(refused.counters?["denied"] == 100 && refused.status == .online, "\(refused.counters ?? [:])")
            // Meanwhile the track service answers another device at once, on the same output connection.
            let b = try await Self.login("devB", constellation)
            let (reply, took) = try await Self.timedCommand(b, device: "devB", "getCount")
            #expect(reply.ok && took < .seconds(1), "\(reply) after \(took)")
            // Never sent again: the count stays at 100 over several health intervals, with no reconnect.
            let later = try await constellation.waitHealth("track", description: "a later health") { $0.timeMs > refused.timeMs + 1_000 }
            #expect(later.counters?["denied"] == 100, "\(later.counters ?? [:])")
            #expect(!constellation.services["track"]!.log.contains("connection to broker lost"), "the refusals dropped the connection")
            await a.disconnect()
            await b.disconnect()
        }

        static func mode(_ path: String) -> mode_t {
            var info = stat()
            return stat(path, &info) == 0 ? info.st_mode & 0o777 : 0
        }

        @Test func noDeviceCanTakeOverAServicesSessionOnAnyListener() async throws {
            let constellation = try await Self.start()
            defer { constellation.stop() }
            let started = try await constellation.waitHealth("filter", description: "filter online") { $0.status == .online }
            let b = try await Self.login("devB", constellation)
            let ids = Constellation.services.flatMap { ["tracker-\($0)", "tracker-\($0)-out"] }
            for (i, id) in ids.enumerated() {
                // devB keeps sending while devA asks for each service's client id and session.
                try b.publish(MQTTMessage(topic: "tracker/devB/fixes", string: fix(1_790_000_000 + Double(i))))
                // On the devices' listener the broker names the connection after devA: it takes nothing over.
                let thief = try MQTTClient(MQTTOptions(port: constellation.broker.port, clientID: id, cleanStart: false, sessionExpirySec: 3_600,
                                                       username: "devA", password: constellation.passwords["devA"]))
                try await thief.connect(timeout: .seconds(5))
                try await thief.subscribe(["tracker/+/raw", "tracker/+/fixes"])
                try b.publish(MQTTMessage(topic: "tracker/devB/fixes", string: fix(1_790_000_100 + Double(i))))
                await thief.disconnect(timeout: .seconds(1))
                // On the operators' listener, where the client id is kept, devA cannot log in at all.
                let onOperators = try MQTTClient(MQTTOptions(port: constellation.broker.operatorPort, clientID: id, cleanStart: false,
                                                             sessionExpirySec: 3_600, username: "devA", password: constellation.passwords["devA"]))
                await #expect(throws: (any Error).self) { try await onOperators.connect(timeout: .seconds(5)) }
                await onOperators.disconnect(timeout: .seconds(1))
                try b.publish(MQTTMessage(topic: "tracker/devB/fixes", string: fix(1_790_000_200 + Double(i))))
            }
            await b.drain(timeout: .seconds(10))
            // Every fix judged, and the filter never lost its session: still the process that started.
            let ctl = try await constellation.operatorClient()
            let total = ids.count * 3
            let deadline = ContinuousClock.now + .seconds(30)
            var judged: [Replay.DecisionRow] = []
            repeat { judged = try await Replay.decisions(of: "devB", with: ctl) } while judged.count < total && ContinuousClock.now < deadline
            #expect(judged.count == total, "\(judged.count) of \(total) fixes judged")
            for service in Constellation.services {
                let health = try await constellation.waitHealth(service, description: "\(service) online") { $0.status == .online }
                if service == "filter" { #expect(health.startedMs == started.startedMs) }
            }
            await ctl.disconnect()
            await b.disconnect()
        }

        @Test func aSecondMapPageReadsNothingOfTheFirst() async throws {
            let constellation = try await Self.start()
            defer { constellation.stop() }
            // The second page listens wherever it can; the first asks its questions.
            let second = try await MessageCollector(port: constellation.broker.port, filters: ["tracker/_map/#", "#"], clientID: "tracker-map-2",
                                                    username: "tracker-map-2", password: constellation.passwords["tracker-map-2"])
            let first = try await Self.login("tracker-map", constellation)
            let firstReplies = "tracker/_map/tracker-map/\(UUID().uuidString.prefix(12))/reply"
            try await first.subscribe([firstReplies])
            for i in 0..<5 {
                let request = CommandRequest(id: .string("q\(i)"), args: .object(["fromMs": .number(0), "toMs": .number(4_000_000_000_000)]))
                let reply = try await first.request(MQTTMessage(topic: "tracker/devA/cmd/getSessions", payload: JSONCoding.bytes(request)),
                                                    responseTopic: firstReplies, timeout: .seconds(10))
                #expect(try JSONCoding.decoder.decode(CommandReply.self, from: Data(reply.payload)).ok)
            }
            // Its own replies do reach the second page (so the check below can fail); an operator asks, as its page would.
            let own = "tracker/_map/tracker-map-2/\(UUID().uuidString.prefix(12))/reply"
            let request = CommandRequest(id: .string("mine"), args: .object(["fromMs": .number(0), "toMs": .number(1)]))
            let ctl = try await constellation.operatorClient()
            try await ctl.publishAndWait(MQTTMessage(topic: "tracker/devA/cmd/getSessions", payload: JSONCoding.bytes(request), responseTopic: own))
            try await second.wait(description: "its own reply") { $0.contains { $0.topic == own } }
            #expect(!second.messages.contains { $0.topic.hasPrefix("tracker/_map/tracker-map/") }, "the second page read the first's replies")
            await ctl.disconnect()
            await first.disconnect()
            await second.close()
        }

        @Test func anAccountCreatesAtMostItsLimitOfDevices() async throws {
            let constellation = try await Self.start()
            defer { constellation.stop() }
            let observer = try await constellation.collector(["tracker/+/raw", "tracker/+/events"])
            // As the apps publish: MQTT 3.1.1, QoS 1, one login, 2,000 device names under it.
            let owner = try await Self.login("owner", constellation, v311: true)
            let t = Int(Date().timeIntervalSince1970)
            for i in 0..<2_000 {
                try await owner.publish(inFlightBelow: 500, MQTTMessage(topic: "owntracks/owner/phone\(i)",
                                              string: #"{"_type":"location","lat":48.1,"lon":11.5,"acc":10,"tst":\#(t)}"#))
            }
            await owner.drain(timeout: .seconds(60))
            try await observer.wait(timeout: 60, description: "an answer for every device") { messages in
                Set(messages.compactMap { $0.topic.split(separator: "/").dropFirst().first }).count >= 2_000
            }
            let tracked = Set(observer.messages.filter { $0.topic.hasSuffix("/raw") }.map { $0.topic.split(separator: "/")[1] })
            let refused = observer.messages.filter { $0.topic.hasSuffix("/events") && $0.string.contains(#""limitReached""#) }
            #expect(tracked.count == 20, "\(tracked.count) devices tracked")
            #expect(refused.count == 1_980, "\(refused.count) limitReached errors")
            #expect(refused.allSatisfy { $0.string.contains("maxDevicesPerAccount") })
            let health = try await constellation.waitHealth("gateway", description: "gateway counts the refusals") {
                ($0.counters?["limitReached"] ?? 0) >= 1_980
            }
            #expect(health.counters?["limitReached"] == 1_980)
            await owner.disconnect()
            await observer.close()
        }

        @Test func anOwnTracksAppKeepsItsConnectionOnItsSubtopics() async throws {
            let constellation = try await Self.start()
            defer { constellation.stop() }
            let observer = try await constellation.collector(["tracker/owner2.phone/events", "tracker/owner2.phone/raw"])
            let log = constellation.broker.directory.appendingPathComponent("owntracks-app.log").path
            let app = try ChildProcess(executable: "/usr/bin/python3",
                                       arguments: [Repository.root.appendingPathComponent("Tests/Clients/owntracks_app.py").path, "127.0.0.1",
                                                   "\(constellation.broker.port)", "owner2", Self.accounts["owner2"]!, "phone"], logFile: log)
            #expect(app.wait(timeout: 60) == 0, "\(app.log)")
            let result = try #require(app.log.split(separator: "\n").last.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] },
                                      "\(app.log)")
            #expect(result["acknowledged"] as? Bool == true, "\(result)")
            #expect((result["drops"] as? [String])?.isEmpty == true, "the broker dropped the app: \(result)")
            // The location was taken, the transition an event, the regions said; each other kind said once as
            // not used (card, status twice, configuration); the command to the app and the empty one only counted.
            try await observer.wait(description: "the location, the transition, the regions and the ignored kinds") { messages in
                messages.contains { $0.topic.hasSuffix("/raw") } && messages.contains { $0.string.contains(#""type":"regionTransition""#) }
                    && messages.filter { $0.string.contains(#""ownTracksRegions""#) }.count >= 2
                    && messages.filter { $0.string.contains(#""code":"ignored""#) }.count >= 4
            }
            #expect(!observer.messages.contains { $0.string.contains(#""type":"error""#) }, "\(observer.messages.map(\.string))")
            let health = try await constellation.waitHealth("gateway", description: "the empty payload counted") { ($0.counters?["emptyIgnored"] ?? 0) >= 1 }
            #expect(health.counters?["emptyIgnored"] == 1)
            let commands = try await constellation.waitHealth("gateway", description: "the command to the app counted") { ($0.counters?["appCommands"] ?? 0) >= 1 }
            #expect(commands.counters?["appCommands"] == 1)
            await observer.close()
        }
    }
}
