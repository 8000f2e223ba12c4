import Bus
import Foundation
import Model
import TestSupport
import Testing

extension HeavySuites {
    /// Several instances of every service, the devices split into 16
    /// partitions (docs/scaling.md): instances killed in turn and the fleet
    /// scaled mid-stream, while five noisy drives stream in. Every raw fix
    /// the gateway stored is judged once, every accepted point is stored
    /// once and delivered once, and survivors take a dead instance's
    /// partitions within 15 s.
    @Suite(.serialized) struct ScaleOutTests {
        static let partitions = 16
        static let devices = (0..<5).map { "scaled-\($0)" }

        /// Five noisy drives, interleaved fix by fix.
        static func fixes(count: Int) throws -> [(device: String, payload: String)] {
            let truth = try Fixtures.fixes("mtv-drive-truth.jsonl")
            let drives = try devices.indices.map { k in Array(try NoiseGenerator(seed: UInt64(k + 41)).lines(over: truth).prefix(count)) }
            return (0..<count).flatMap { i in devices.indices.compactMap { k in i < drives[k].count ? (devices[k], drives[k][i]) : nil } }
        }

        @Test func instancesKilledInTurnLoseNothingAndDoNothingTwice() async throws {
            let fleet = try ScaledConstellation(partitions: Self.partitions)
            defer { fleet.stopAll() }
            try fleet.startAll("a")
            try fleet.startAll("b")
            try await fleet.waitEveryServiceShared(among: ["a", "b"])
            let client = try await fleet.client()
            try await Self.syncToSink(fleet, with: client)

            let fixes = try Self.fixes(count: 300)
            let publisher = try await fleet.client()
            let slice = fixes.count / (ScaledConstellation.services.count + 1)
            var takeovers: [String: Duration] = [:]
            for (turn, service) in ScaledConstellation.services.enumerated() {
                try await Replay.publish(Array(fixes[(turn * slice)..<((turn + 1) * slice)]), with: publisher)
                // kill -9 in the middle of the stream: b alone runs every partition of the service.
                fleet.kill9(service, "a")
                takeovers[service] = try await fleet.waitShared(service, among: ["b"], timeout: 30)
                try fleet.start(service, "a")
            }
            try await Replay.publish(Array(fixes[(ScaledConstellation.services.count * slice)...]), with: publisher)
            try await fleet.waitEveryServiceShared(among: ["a", "b"])
            print("scale out, kill -9 in turn: survivors took over in \(takeovers.mapValues { "\($0)" })")
            for (service, took) in takeovers { #expect(took < .seconds(15), "\(service): the survivor took \(took)") }
            try await Self.expectEachOnce(published: fixes, fleet: fleet, client: client, resentAllowed: true)
            await publisher.disconnect()
            await client.disconnect()
        }

        /// With the product's broker config and ACL: the services log in with
        /// their accounts on the listener that keeps client ids.
        @Test func scalingOneTwoThreeTwoMidStreamLosesNothing() async throws {
            let fleet = try ScaledConstellation(partitions: Self.partitions, logins: true)
            defer { fleet.stopAll() }
            try fleet.startAll("a")
            try await fleet.waitEveryServiceShared(among: ["a"])
            let client = try await fleet.client()
            try await Self.syncToSink(fleet, with: client)

            let fixes = try Self.fixes(count: 300)
            let publisher = try await fleet.client()
            let quarter = fixes.count / 4
            try await Replay.publish(Array(fixes[0..<quarter]), with: publisher)
            try fleet.startAll("b")  // 1 → 2
            try await fleet.waitEveryServiceShared(among: ["a", "b"])
            try await Replay.publish(Array(fixes[quarter..<(2 * quarter)]), with: publisher)
            try fleet.startAll("c")  // 2 → 3
            try await fleet.waitEveryServiceShared(among: ["a", "b", "c"])
            try await Replay.publish(Array(fixes[(2 * quarter)..<(3 * quarter)]), with: publisher)
            for service in ScaledConstellation.services { #expect(fleet.stop(service, "b") == 0, "\(service)-b's graceful stop") }  // 3 → 2
            try await fleet.waitEveryServiceShared(among: ["a", "c"])
            // The health check passes for the service as a whole, and for each instance; b's is offline now.
            for service in ScaledConstellation.services {
                let whole = try fleet.trackerctl(["health", "--wait", "0.5", "--check", service])
                #expect(whole.code == 0, "\(whole.output)")
                let gone = try fleet.trackerctl(["health", "--wait", "0.5", "--check", service, "--instance", ScaledConstellation.instanceID(service, "b")])
                #expect(gone.code == 1, "\(gone.output)")
            }
            let table = try fleet.trackerctl(["health", "--wait", "0.5"])
            #expect(table.output.contains("partitions "), "\(table.output)")
            try await Replay.publish(Array(fixes[(3 * quarter)...]), with: publisher)
            try await Self.expectEachOnce(published: fixes, fleet: fleet, client: client)
            await publisher.disconnect()
            await client.disconnect()
        }

        /// Two processes started with one instance id: the second takes the
        /// first's control connection, and the first stops with exit code 1,
        /// saying why, instead of the two running partitions side by side.
        @Test func aSecondProcessWithTheSameInstanceIdStopsTheFirstSayingWhy() async throws {
            let fleet = try ScaledConstellation(partitions: 2)
            defer { fleet.stopAll() }
            try fleet.start("gateway", "a")
            try await fleet.waitShared("gateway", among: ["a"])
            let twin = try fleet.process("gateway", "a")
            try twin.start()
            defer { twin.stop() }
            let first = try #require(fleet.instances["gateway"]?["a"]?.process)
            #expect(first.wait(timeout: 30) == 1)
            #expect(first.log.contains("two instances run with the instance id 'tracker-gateway-a'"), "\(first.log.suffix(2_000))")
            // The one left runs every partition.
            try await fleet.waitShared("gateway", among: ["a"])
        }

        /// A `_fleet` command reaches every partition and its asker gets one
        /// reply made of all of theirs: the fleet fence's crossings of devices
        /// in different partitions (run by two motion instances), merged newest
        /// first and paged; the count deleted summed; the devices' live frames
        /// (two track instances) in device order, page by page; one reply on
        /// the MQTT 3.1.1 reply topic, not one per partition.
        @Test func aFleetCommandIsAnsweredOnceForEveryPartition() async throws {
            let partitions = 4
            let fleet = try ScaledConstellation(partitions: partitions)
            defer { fleet.stopAll() }
            for service in ["gateway", "filter"] { try fleet.start(service, "a") }
            for service in ["motion", "track"] {
                try fleet.start(service, "a")
                try fleet.start(service, "b")
            }
            for service in ["gateway", "filter"] { _ = try await fleet.waitShared(service, among: ["a"]) }
            for service in ["motion", "track"] { _ = try await fleet.waitShared(service, among: ["a", "b"]) }
            // Devices in three different partitions.
            let split = Partitioning(count: partitions)
            var devices: [String] = []
            for n in 0..<100 where devices.count < 3 {
                let id = "fleet-\(n)"
                if !devices.contains(where: { split.partition(ofSegment: $0) == split.partition(ofSegment: id) }) { devices.append(id) }
            }
            let frame = LocalFrame(originLat: 48.1, originLon: 11.5)
            let client = try await fleet.client()
            let (lat, lon) = frame.toGeo(x: 500, y: 0)
            let added = try await TestClient.command(client, device: "_fleet", "addGeofence", args: .object([
                "id": .string("depot"), "latitude": .number(lat), "longitude": .number(lon), "radiusM": .number(150)]))
            #expect(added.ok, "\(added)")
            // Each drives east through the depot, a device a minute after the other.
            for (i, device) in devices.enumerated() {
                let lines = (0...100).map { t in
                    let (lat, lon) = frame.toGeo(x: Double(t) * 10, y: 0)
                    return String(format: #"{"t":%.3f,"lat":%.8f,"lon":%.8f,"acc":5,"speed":10,"course":90}"#,
                                  1_790_000_000.0 + Double(i * 60 + t), lat, lon)
                }
                for line in lines { try await client.publishAndWait(MQTTMessage(topic: "tracker/\(device)/fixes", string: line)) }
            }
            // Each device's own crossings, from its partition: an entry and an exit.
            var each: [JSONValue] = []
            let deadline = ContinuousClock.now + .seconds(60)
            for device in devices {
                var items: [JSONValue] = []
                repeat {
                    let reply = try await TestClient.command(client, device: device, "getGeofenceEvents")
                    if case .array(let list) = reply.result { items = list }
                } while items.count < 2 && ContinuousClock.now < deadline
                #expect(items.count == 2, "\(device): \(items)")
                each += items
            }
            func timeMs(_ item: JSONValue) -> Double {
                if case .object(let fields) = item, case .number(let t) = fields["timeMs"] ?? .null { t } else { -1 }
            }
            let newestFirst = each.sorted { timeMs($0) > timeMs($1) }
            let all = try await TestClient.command(client, device: "_fleet", "getGeofenceEvents")
            #expect(all.result == .array(newestFirst), "\(all)")
            let page = try await TestClient.command(client, device: "_fleet", "getGeofenceEvents", args: .object(["limit": .number(3), "offset": .number(2)]))
            #expect(page.result == .array(Array(newestFirst[2..<5])), "\(page)")

            // Every device's live frame at its last fix, two a page.
            func lastFixMs(_ i: Int) -> Double { (1_790_000_000.0 + Double(i * 60 + 100)) * 1000 }
            var framed: [String: Double] = [:]
            repeat {
                framed = [:]
                var after: String?
                repeat {
                    var args: [String: JSONValue] = ["limit": .number(2)]
                    if let after { args["after"] = .string(after) }
                    let reply = try await TestClient.command(client, device: "_fleet", "getLive", args: .object(args))
                    #expect(reply.ok && (reply.result?["frames"]?.arrayValue?.count ?? 0) <= 2, "\(reply)")
                    for frame in reply.result?["frames"]?.arrayValue ?? [] {
                        if let device = frame["device"]?.stringValue { framed[device] = frame["timeMs"]?.doubleValue }
                    }
                    after = reply.result?["next"]?.stringValue
                } while after != nil
            } while !devices.enumerated().allSatisfy({ framed[$1] == lastFixMs($0) }) && ContinuousClock.now < deadline
            #expect(framed.keys.sorted() == devices.sorted(), "\(framed)")
            for (i, device) in devices.enumerated() { #expect(framed[device] == lastFixMs(i), "\(device)") }

            // Without a response topic (MQTT 3.1.1), one reply each on the contract's reply topic.
            let replies = try await fleet.collector(["tracker/_fleet/reply/getGeofences"])
            func ask(_ id: String) async throws {
                try await client.publishAndWait(MQTTMessage(topic: "tracker/_fleet/cmd/getGeofences", string: #"{"id":"\#(id)"}"#))
            }
            @Sendable func answered(_ id: String) -> @Sendable ([MQTTMessage]) -> Bool {
                { messages in messages.contains { $0.string.contains(#""id":"\#(id)""#) } }
            }
            try await ask("one")
            try await ask("two")
            _ = try await replies.wait(description: "the replies to one and two") { answered("one")($0) && answered("two")($0) }
            // What a partition would have sent beside the gather came by the time a third is answered.
            try await ask("three")
            let received = try await replies.wait(description: "the reply to three", until: answered("three"))
            #expect(received.filter { $0.string.contains(#""id":"one""#) }.count == 1, "\(received.map(\.string))")
            #expect(received.filter { $0.string.contains(#""id":"two""#) }.count == 1, "\(received.map(\.string))")
            await replies.close()

            let deleted = try await TestClient.command(client, device: "_fleet", "deleteGeofenceEvents")
            #expect(deleted.result == .number(Double(each.count)), "\(deleted)")
            let none = try await TestClient.command(client, device: "_fleet", "getGeofenceEvents")
            #expect(none.result == .array([]), "\(none)")
            await client.disconnect()
        }

        /// An OwnTracks user's devices hash to different partitions: the
        /// limit of devices per account holds across all of them (the
        /// gateway's ingress counts them), and each refused device is told once.
        @Test func anAccountsDeviceLimitHoldsAcrossPartitions() async throws {
            let fleet = try ScaledConstellation(partitions: 4, config: ["maxDevicesPerAccount": 3])
            defer { fleet.stopAll() }
            try fleet.start("gateway", "a")
            try fleet.start("gateway", "b")
            _ = try await fleet.waitShared("gateway", among: ["a", "b"])
            let observer = try await fleet.collector(["tracker/_p/+/+/raw", "tracker/+/events"])
            let app = try await fleet.client()
            let t = Int(Date().timeIntervalSince1970)
            let names = (0..<12).map { "phone\($0)" }
            #expect(Set(names.map { Partitioning(count: 4).partition(of: DeviceID.ownTracks(user: "owner", device: $0)) }).count == 4)
            for name in names + ["phone11"] {
                try await app.publishAndWait(MQTTMessage(topic: "owntracks/owner/\(name)",
                                                         string: #"{"_type":"location","lat":48.1,"lon":11.5,"acc":10,"tst":\#(t)}"#))
            }
            @Sendable func refusals(_ messages: [MQTTMessage]) -> [MQTTMessage] {
                messages.filter { $0.topic.hasSuffix("/events") && $0.string.contains(#""limitReached""#) }
            }
            @Sendable func raw(_ messages: [MQTTMessage]) -> Set<Substring> {
                Set(messages.filter { $0.topic.hasSuffix("/raw") }.map { $0.topic.split(separator: "/")[3] })
            }
            try await observer.wait(description: "3 devices tracked, 9 refused") { raw($0).count >= 3 && refusals($0).count >= 9 }
            // phone11, sent twice, is counted twice and told once.
            var counted: Int64 = 0
            let deadline = ContinuousClock.now + .seconds(30)
            repeat {
                counted = try await fleet.health("gateway", instances: 2).values.reduce(0) { $0 + ($1.counters?["limitReached"] ?? 0) }
            } while counted < 10 && ContinuousClock.now < deadline
            #expect(counted == 10)
            #expect(raw(observer.messages).count == 3, "\(raw(observer.messages))")
            #expect(refusals(observer.messages).count == 9)
            #expect(refusals(observer.messages).allSatisfy { $0.string.contains("(the limit is 3)") })
            await app.disconnect()
            await observer.close()
        }

        /// The partitions changed on a stopped deployment (docs/scaling.md,
        /// "Changing partitions"): unpartitioned → 3 → 2, each time with
        /// every service stopped and `tracker-{service} repartition`, and
        /// fixes sent while everything is stopped. Every device keeps its
        /// state, numbering and history: every raw fix is judged once and
        /// every accepted point stored and delivered once.
        @Test func changingPartitionsMovesEveryDevicesStateAndLosesNothing() async throws {
            let fleet = try ScaledConstellation(partitions: 1)
            defer { fleet.stopAll() }
            try fleet.startAll("a")
            try await fleet.broker.waitUntilOnline("gateway", "filter", "motion", "track", "uploader")
            let client = try await fleet.client()
            try await Self.syncToSink(fleet, with: client)
            let fixes = try Self.fixes(count: 180)
            let publisher = try await fleet.client()
            let part = fixes.count / 5
            var sent = 0
            func send(_ n: Int) async throws {
                try await Replay.publish(Array(fixes[sent..<(sent + n)]), with: publisher)
                sent += n
            }
            try await send(part)
            try await Self.expectEachOnce(published: Array(fixes[..<sent]), fleet: fleet, client: client)
            // Refused while the unpartitioned services run (each holds its store's lock).
            let running = try fleet.repartition(to: 3)
            #expect(running.values.allSatisfy { $0.code == 1 && $0.output.contains("in use") }, "\(running)")

            for (count, instances) in [(3, ["a"]), (2, ["a", "b"])] {
                // The gateway first: what comes meanwhile waits for its session at the broker.
                for service in ScaledConstellation.services { #expect(fleet.stop(service, "a") == 0, "\(service)'s graceful stop") }
                if count == 2 {
                    // What the ingress had forwarded to partition 2 of 3 and it had not read when it stopped: that
                    // partition is removed, and its session is drained to the device's partition of 2.
                    let three = Partitioning(count: 3)
                    let removed = try #require(Self.devices.first { three.partition(ofSegment: $0) == 2 })
                    for (device, payload) in fixes[sent..<(sent + part / 2)] {
                        let topic = device == removed ? "tracker/_p/2/\(device)/fixes" : "tracker/\(device)/fixes"
                        try await publisher.publishAndWait(MQTTMessage(topic: topic, string: payload))
                    }
                    sent += part / 2
                } else {
                    try await send(part / 2)
                }
                for (service, result) in try fleet.repartition(to: count) {
                    #expect(result.code == 0, "\(service): \(result.output)")
                    #expect(result.output.contains("→ \(count) partitions"), "\(service): \(result.output)")
                }
                for name in instances { try fleet.startAll(name) }
                try await fleet.waitEveryServiceShared(among: instances)
                try await send(part / 2)
                try await Self.expectEachOnce(published: Array(fixes[..<sent]), fleet: fleet, client: client)
            }
            // A repartition is refused while an instance runs, and changes nothing.
            let refused = try fleet.repartition(to: 4)
            #expect(refused.values.allSatisfy { $0.code == 1 && $0.output.contains("in use") }, "\(refused)")
            await publisher.disconnect()
            await client.disconnect()
        }

        /// Points the uploader at the fleet's sink, retrying fast after a failure.
        static func syncToSink(_ fleet: ScaledConstellation, with client: MQTTClient) async throws {
            let synced = try await TestClient.command(client, device: "_fleet", "configureSync", args: .object([
                "url": .string(fleet.sinkURL), "batchSize": .number(200), "retryBaseDelaySec": .number(0.05),
                "retryMaxDelaySec": .number(0.5)]))
            #expect(synced.ok, "\(synced)")
        }

        /// A broker that loses every queue and session (restarted without
        /// persistence) while the consumers are behind: what it forgot
        /// between the services is repaired from the producers' logs, per
        /// partition, and the partitions' sessions and leases come back.
        @Test func aBrokerThatForgetsEverythingLosesNothingBetweenTheServices() async throws {
            // Two partitions, so that what waits for each stalled session is more than the
            // broker sends ahead of acknowledgements (1,000 a session), and the broker holds it.
            let fleet = try ScaledConstellation(partitions: 2, persistentBroker: false)
            defer { fleet.stopAll() }
            try fleet.startAll("a")
            try fleet.startAll("b")
            try await fleet.waitEveryServiceShared(among: ["a", "b"])
            var client = try await fleet.client()
            try await Self.syncToSink(fleet, with: client)
            await client.disconnect()

            let fixes = try Self.fixes(count: 700)
            let publisher = try await fleet.client()
            let half = fixes.count / 7
            try await Replay.publish(Array(fixes[0..<half]), with: publisher)
            // The consumers stall while the gateway takes the rest: it all waits at the broker when the broker goes.
            let consumers = ["filter", "motion", "track", "uploader"].flatMap { service in
                ["a", "b"].compactMap { fleet.instances[service]?[$0]?.process }
            }
            consumers.forEach { $0.kill(SIGSTOP) }
            try await Replay.publish(Array(fixes[half...]), with: publisher)
            try await fleet.waitProcessed("gateway", Int64(fixes.count))
            await publisher.disconnect()
            try fleet.broker.restart(graceful: true)
            consumers.forEach { $0.kill(SIGCONT) }
            try await fleet.waitEveryServiceShared(among: ["a", "b"])
            client = try await fleet.client()
            try await Self.expectEachOnce(published: fixes, fleet: fleet, client: client)
            // The repair is what brought the stalled consumers' queues back: else the test proved nothing.
            let health = try await fleet.health("filter", instances: 2)
            let repaired = health.values.reduce(0) { $0 + ($1.counters?["repaired"] ?? 0) }
            let gaps = health.values.reduce(0) { $0 + ($1.counters?["streamGaps"] ?? 0) }
            print("scale out, broker without persistence restarted: the filters repaired \(repaired) raw fixes")
            #expect(repaired > 0)
            #expect(gaps == 0)
            await client.disconnect()
        }

        /// Each device's stored raw fixes are all it sent, each judged once;
        /// its accepted fixes are stored once by track and delivered once.
        /// `resentAllowed`: an uploader killed mid-request sends that batch
        /// again (with the same `Idempotency-Key`), so its points may arrive twice.
        static func expectEachOnce(published: [(device: String, payload: String)], fleet: ScaledConstellation,
                                   client: MQTTClient, resentAllowed: Bool = false) async throws {
            let deadline = ContinuousClock.now + .seconds(120)
            var acceptedTotal = 0
            for device in devices {
                let sent = published.filter { $0.device == device }.count
                var raw: [Replay.SeqRow] = [], decisions: [Replay.DecisionRow] = []
                repeat {
                    raw = try await Replay.all("getRawFixes", of: device, with: client)
                    decisions = try await Replay.decisions(of: device, with: client)
                } while (raw.count < sent || Set(decisions.map(\.seq)) != Set(raw.map(\.seq))) && ContinuousClock.now < deadline
                #expect(raw.count == sent && Set(raw.map(\.seq)).count == sent, "\(device): the gateway stored \(raw.count) raw fixes of \(sent) sent")
                #expect(decisions.count == raw.count && Set(decisions.map(\.seq)) == Set(raw.map(\.seq)),
                        "\(device): \(decisions.count) decisions (\(Set(decisions.map(\.seq)).count) distinct) for \(raw.count) raw fixes")
                let accepted = Set(decisions.filter(\.accepted).map(\.seq))
                acceptedTotal += accepted.count
                try await Replay.expectStoredOnce(accepted, of: device, with: client, until: deadline)
            }
            var points: [String: Int] = [:]
            var synced: CommandReply?
            while ContinuousClock.now < deadline {
                synced = try await TestClient.command(client, device: "_fleet", "syncNow", timeout: 30)
                points = fleet.sink!.points()
                if points.count >= acceptedTotal { break }
            }
            #expect(points.count == acceptedTotal, """
                the sink holds \(points.count) distinct of \(acceptedTotal) accepted points; \(fleet.sink!.lines.count) requests kept; \
                the last syncNow: \(synced.map { "\($0)" } ?? "none"); the sink's log: \(fleet.sink!.log.suffix(1_000)); \
                the uploaders' logs: \(fleet.logs("uploader", suffix: 2_000))
                """)
            let twice = points.values.filter { $0 > 1 }.count
            if resentAllowed { print("scale out: \(twice) points resent by a killed uploader") } else {
                #expect(twice == 0, "\(twice) points delivered more than once")
            }
        }
    }
}
