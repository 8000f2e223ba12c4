import Bus
import Foundation
import Model
import TestSupport
import Testing

/// The product's ACL (`config/acl`) on a real mosquitto with logins: each
/// hole the anonymous broker had is closed. Every refusal is checked next to
/// the same act done rightly, so a test cannot pass because nothing worked.
@Suite(.serialized) struct AccessControlTests {
    let broker: TestBroker
    let gateway: ServiceHarness
    static let gatewayPassword = "gw-\(UUID().uuidString)"
    static let passwords = ["tracker-gateway": gatewayPassword, "tracker-gateway-out": gatewayPassword,
                            "tracker-filter": "f-\(UUID().uuidString)", "trackerctl": "ctl-\(UUID().uuidString)",
                            "tracker-map": "m-\(UUID().uuidString)",
                            "devA": "a-\(UUID().uuidString)", "devB": "b-\(UUID().uuidString)"]

    init() throws {
        let acl = Repository.root.appendingPathComponent("config/acl").path
        broker = try TestBroker(accounts: .init(Self.passwords, aclFile: acl), messageSizeLimit: TestBroker.productMessageSizeLimit)
        gateway = try ServiceHarness(executable: "tracker-gateway", broker: broker, config: ["healthIntervalSec": 0.2],
                                     environment: ["TRACKER_MQTT_USERNAME": "tracker-gateway", "TRACKER_MQTT_PASSWORD": Self.passwords["tracker-gateway"]!])
        try gateway.start()
    }

    func login(_ user: String, password: String? = nil) async throws -> MQTTClient {
        let client = try MQTTClient(MQTTOptions(port: broker.port, clientID: "\(user)-\(UUID().uuidString.prefix(6))", cleanStart: true,
                                                username: user, password: password ?? Self.passwords[user]))
        try await client.connect(timeout: .seconds(5))
        return client
    }

    func fix(_ t: Double) -> String { #"{"t":\#(t),"lat":48.1,"lon":11.5,"acc":5}"# }

    /// Each denied publish gets a connection of its own: after one, mosquitto
    /// 2.0.11 closes an MQTT 5 client's connection (seen in its log: "Denied
    /// PUBLISH", then the connection gone), which would blur what comes next.
    @Test func aDeviceReachesOnlyItsOwnTopics() async throws {
        // An operator's account sees what the services publish (on the
        // operator's listener, where the client id is kept as asked).
        let observer = try await MessageCollector(port: broker.operatorPort, filters: ["tracker/#"], clientID: "trackerctl-\(UUID().uuidString.prefix(6))",
                                                  username: "trackerctl", password: Self.passwords["trackerctl"])
        try await observer.wait(description: "gateway online") { $0.contains { $0.topic == "tracker/_health/gateway" && $0.string.contains(#""online""#) } }
        // As another device, onto an internal topic, a forged retained health, a command to another device: all dropped.
        for (topic, payload, retain) in [("tracker/devB/fixes", fix(1_790_000_000), false), ("tracker/devA/raw", "{}", false),
                                         ("tracker/_health/gateway", #"{"status":"online","service":"forged"}"#, true),
                                         ("tracker/devB/cmd/start", "{}", false), ("owntracks/devB/phone", "{}", false)] {
            let rogue = try await login("devA")
            try rogue.publish(MQTTMessage(topic: topic, payload: Array(payload.utf8), qos: .atMostOnce, retain: retain))
            await rogue.disconnect(timeout: .seconds(1))
        }
        // Then its own fix and its own command: these go through.
        let a = try await login("devA")
        try await a.publishAndWait(MQTTMessage(topic: "tracker/devA/fixes", string: fix(1_790_000_001)))
        try await observer.wait(description: "devA's raw fix") { $0.contains { $0.topic == "tracker/devA/raw" } }
        let own = try await TestClientAs.command(a, device: "devA", "currentSession")
        #expect(own.ok)
        await a.disconnect()
        // devA listens to everything it may: "#" is granted, but the broker delivers only what devA may read.
        // (A device logs in only where the broker names its connection after it: one devA connection at a time.)
        let listener = try await MessageCollector(port: broker.port, filters: ["#"], clientID: "devA-listen-\(UUID().uuidString.prefix(6))",
                                                  username: "devA", password: Self.passwords["devA"])
        // Another device's events, published by a service, never reach devA; its own do.
        let ctl = try await login("trackerctl")
        try await ctl.publishAndWait(MQTTMessage(topic: "tracker/devB/events", string: #"{"type":"probe","device":"devB","timeMs":1}"#))
        try await ctl.publishAndWait(MQTTMessage(topic: "tracker/devA/events", string: #"{"type":"probe","device":"devA","timeMs":2}"#))
        try await listener.wait(description: "devA's own event") { $0.contains { $0.topic == "tracker/devA/events" && $0.string.contains("probe") } }
        #expect(!listener.messages.contains { $0.topic.contains("devB") || $0.topic.contains("/raw") || $0.topic.contains("_health") })
        // The gateway saw nothing of the forged ones: no devB raw fix, no devB session, the health still its own.
        #expect(!observer.messages.contains { $0.topic.hasPrefix("tracker/devB/") && !$0.string.contains("probe") })
        #expect(!observer.messages.contains { $0.topic == "tracker/devA/raw" && $0.string.contains("1790000000000") })
        #expect(!observer.messages.contains { $0.topic == "tracker/_health/gateway" && $0.string.contains("forged") })
        // A wrong password is no login at all.
        await #expect(throws: (any Error).self) { _ = try await login("devB", password: "wrong") }
        await ctl.disconnect()
        await listener.close()
        await observer.close()
    }

    /// Probed on the anonymous broker: `-i tracker-filter -c` took over the
    /// filter's persistent session and consumed its queued fixes. Now the
    /// broker names the connection after its account, so the queue waits
    /// for the service.
    @Test func noAccountCanTakeOverAServicesSession() async throws {
        let service = "tracker-filter", password = Self.passwords["tracker-filter"]!
        var victim = try await MessageCollector(port: broker.port, filters: ["tracker/+/raw"], clientID: service,
                                                username: service, password: password, persistentSession: true)
        await victim.close()
        // Fixes queue for the service while it is away.
        let ctl = try await login("trackerctl")
        for seq in 1...3 {
            try await ctl.publishAndWait(MQTTMessage(topic: "tracker/devA/raw", string: #"{"seq":\#(seq)}"#))
        }
        // devA asks for the service's client id and its session.
        let thief = try await MessageCollector(port: broker.port, filters: ["tracker/devA/events"], clientID: service,
                                               username: "devA", password: Self.passwords["devA"], persistentSession: true)
        // A probe on devA's own topic: anything the stolen session held would have come before it.
        try await ctl.publishAndWait(MQTTMessage(topic: "tracker/devA/events", string: #"{"type":"probe","device":"devA","timeMs":3}"#))
        try await thief.wait(description: "the probe") { $0.contains { $0.topic == "tracker/devA/events" } }
        await thief.close()
        // The service comes back to its whole queue.
        victim = try await MessageCollector(port: broker.port, filters: ["tracker/+/raw"], clientID: service,
                                            username: service, password: password, persistentSession: true)
        try await victim.wait(description: "the three queued fixes") { $0.filter { $0.topic == "tracker/devA/raw" }.count >= 3 }
        #expect(victim.messages.filter { $0.topic == "tracker/devA/raw" }.count == 3)
        await victim.close()
        await ctl.disconnect()
    }

    /// The map page's account reads and asks read-only questions; the ACL
    /// refuses it fixes, other commands and internal topics.
    @Test func theMapAccountOnlyReadsAndAsks() async throws {
        let observer = try await MessageCollector(port: broker.operatorPort, filters: ["tracker/#"], clientID: "trackerctl-\(UUID().uuidString.prefix(6))",
                                                  username: "trackerctl", password: Self.passwords["trackerctl"])
        try await observer.wait(description: "gateway online") { $0.contains { $0.topic == "tracker/_health/gateway" && $0.string.contains(#""online""#) } }
        for (topic, payload) in [("tracker/devA/fixes", fix(1_790_000_100)), ("tracker/devA/cmd/start", #"{"id":"x"}"#),
                                 ("tracker/devA/raw", "{}"), ("tracker/devA/cmd/configureSync", #"{"id":"y","args":{"url":"http://x"}}"#)] {
            let map = try await login("tracker-map")
            try map.publish(MQTTMessage(topic: topic, payload: Array(payload.utf8), qos: .atMostOnce))
            await map.disconnect(timeout: .seconds(1))
        }
        // Its read-only question is answered on its own reply topic.
        let map = try await login("tracker-map")
        let replyTopic = "tracker/_map/tracker-map/reply"
        try await map.subscribe([replyTopic])
        let request = CommandRequest(id: .string("q1"), args: .object(["fromMs": .number(0), "toMs": .number(4_000_000_000_000)]))
        let reply = try await map.request(MQTTMessage(topic: "tracker/devA/cmd/getSessions", payload: JSONCoding.bytes(request)),
                                          responseTopic: replyTopic, timeout: .seconds(10))
        #expect(try JSONCoding.decoder.decode(CommandReply.self, from: Data(reply.payload)).ok)
        // None of the refused ones reached the gateway: no fix, no session, no reply to them.
        #expect(!observer.messages.contains { $0.topic == "tracker/devA/raw" || $0.topic == "tracker/devA/fixes" })
        #expect(!observer.messages.contains { $0.topic.hasPrefix("tracker/devA/cmd/") && $0.topic != "tracker/devA/cmd/getSessions" })
        #expect(!observer.messages.contains { $0.topic == "tracker/devA/events" && $0.string.contains("sessionStarted") })
        await map.disconnect()
        await observer.close()
    }

    @Test func aPayloadOverTheBrokersLimitIsRefused() async throws {
        let a = try await login("devA")
        let big = String(repeating: " ", count: 2_200_000) + fix(1_790_000_002)
        // Over the limit the broker refuses it (and the client library drops the connection, as above).
        await #expect(throws: (any Error).self) { try await a.publishAndWait(MQTTMessage(topic: "tracker/devA/fixes", string: big), timeout: .seconds(5)) }
        await a.disconnect()
    }
}

/// Commands with a device's own reply topic (the ACL lets it read only those).
enum TestClientAs {
    static func command(_ client: MQTTClient, device: String, _ name: String) async throws -> CommandReply {
        let responseTopic = "tracker/\(device)/reply/\(name)-\(UUID().uuidString.prefix(6))"
        try await client.subscribe([responseTopic])
        let request = CommandRequest(id: .string(UUID().uuidString))
        let reply = try await client.request(MQTTMessage(topic: "tracker/\(device)/cmd/\(name)", payload: JSONCoding.bytes(request)),
                                             responseTopic: responseTopic, timeout: .seconds(10))
        return try JSONCoding.decoder.decode(CommandReply.self, from: Data(reply.payload))
    }
}
