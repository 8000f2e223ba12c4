import Foundation
import Bus
import Model
@testable import Runtime
import Testing

@Suite struct OutboxTests {
    let device = DeviceID("p1")!

    @Test func watermarkWaitsForTheOldestUnacknowledged() throws {
        let outbox = Outbox(topic: { "t/\($0)/raw" })
        let bus = OutOfOrderBus()
        outbox.restore(device, ackedThrough: 10)
        for seq in 11...15 { try outbox.send(device, seq: Int64(seq), body: Array("\(seq)".utf8), on: bus) }
        bus.acknowledge(12); bus.acknowledge(13)
        #expect(outbox.ackedThrough(device) == 10)  // 11 still out
        bus.acknowledge(11)
        #expect(outbox.ackedThrough(device) == 13)
        #expect(outbox.pendingCount == 2)
        bus.acknowledge(15); bus.acknowledge(14)
        #expect(outbox.ackedThrough(device) == 15 && outbox.pendingCount == 0)
    }

    @Test func onlyAdvancedWatermarksAreSavedAgain() throws {
        let outbox = Outbox(topic: { "t/\($0)/raw" })
        let bus = OutOfOrderBus()
        outbox.restore(device, ackedThrough: 5)
        #expect(outbox.takeUnsaved().isEmpty)
        try outbox.send(device, seq: 6, body: Array("6".utf8), on: bus)
        bus.acknowledge(6)
        let moved = outbox.takeUnsaved()
        #expect(moved.count == 1 && moved[0].1 == 6)
        #expect(outbox.takeUnsaved().isEmpty)
        outbox.unsave(moved)  // the write failed: it must be offered again
        #expect(outbox.takeUnsaved().map { $0.1 } == [6])
    }
}

/// A broker that acknowledges whichever message the test names (by its body, the seq).
final class OutOfOrderBus: MessageBus, @unchecked Sendable {
    private var acks: [String: MQTTClient.Acknowledgement] = [:]
    func publish(_ message: MQTTMessage, acknowledged: MQTTClient.Acknowledgement?) throws { acks[message.string] = acknowledged }
    func acknowledge(_ seq: Int) { acks.removeValue(forKey: "\(seq)")?(.success(())) }
}

@Suite struct SettingsReaderTests {
    func reader(_ values: [String: JSONValue], env: [String: String] = [:]) throws -> SettingsReader {
        let reader = SettingsReader(values: values, source: "test.json")
        try reader.applyEnvironment(env)
        return reader
    }

    @Test func environmentWinsOverTheFile() throws {
        let settings = try CommonSettings(service: "gateway", reader(["mqttPort": .number(1883)], env: ["TRACKER_MQTT_PORT": "2883"]))
        #expect(settings.mqttPort == 2883 && settings.instance == "tracker-gateway")
    }

    /// Instances of a partitioned service need distinct ids: each takes its
    /// host's name unless given one (a pod's, a container's).
    @Test func aPartitionedInstanceIsNamedAfterItsHost() throws {
        let host = ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init)!
        let partitioned = try CommonSettings(service: "filter", reader([:], env: ["TRACKER_PARTITIONS": "16"]))
        #expect(partitioned.partitions == 16 && partitioned.instance == "tracker-filter-\(host)")
        let named = try CommonSettings(service: "filter", reader([:], env: ["TRACKER_PARTITIONS": "16", "TRACKER_INSTANCE": "filter-a"]))
        #expect(named.instance == "filter-a")
        #expect(try CommonSettings(service: "filter", reader([:])).partitions == 1)
        #expect { try CommonSettings(service: "filter", reader(["partitions": .number(0)])) } throws: {
            ($0 as? ConfigError)?.setting == "partitions"
        }
        // The ids of the service's own sessions (the ingress's, a partition's) would take them over.
        for taken in ["tracker-filter", "tracker-filter-p3"] {
            #expect { try CommonSettings(service: "filter", reader([:], env: ["TRACKER_PARTITIONS": "16", "TRACKER_INSTANCE": taken])) } throws: {
                ($0 as? ConfigError)?.setting == "instance"
            }
        }
        #expect(try CommonSettings(service: "filter", reader([:], env: ["TRACKER_PARTITIONS": "16", "TRACKER_INSTANCE": "tracker-filter-pod"])).instance
                == "tracker-filter-pod")
    }

    @Test func badSettingsNameThemselves() throws {
        #expect { try CommonSettings(service: "g", reader(["mqttPort": .number(70_000)])) } throws: {
            ($0 as? ConfigError)?.setting == "mqttPort"
        }
        #expect { try CommonSettings(service: "g", reader(["topicPrefix": .string("a/b")])) } throws: {
            ($0 as? ConfigError)?.setting == "topicPrefix"
        }
        #expect { try reader([:], env: ["TRACKER_MQTT_PORT": "http"]) } throws: {
            ($0 as? ConfigError)?.setting == "TRACKER_MQTT_PORT"
        }
    }

    @Test func aConfigFileSyntaxErrorSaysWhere() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("bad-\(UUID().uuidString).json").path
        try Data("{\n  \"logLevel\": \"info\",\n  \"mqttPort\": 1883,,\n}\n".utf8).write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        #expect { try SettingsReader.load(service: "gateway", arguments: ["--config", path], environment: [:]) } throws: {
            ($0 as? ConfigError)?.description.contains("line 3, column 20: expected a quoted key") == true
        }
    }

    /// A file that cannot be read is said as strerror says it, not as the error's structure.
    @Test func aPasswordFileThatCannotBeReadSaysWhy() throws {
        #expect { try SettingsReader.password(fromFile: "/nonexistent/tracker-password") } throws: {
            ($0 as? ConfigError)?.description.hasSuffix("cannot read /nonexistent/tracker-password: No such file or directory") == true
        }
    }

    @Test func unknownKeysAreRefused() throws {
        let r = try reader(["mqttHost": .string("h"), "ringCapacty": .number(5)])
        _ = try CommonSettings(service: "gateway", r)
        #expect { try r.rejectUnknownKeys() } throws: { ($0 as? ConfigError)?.setting == "ringCapacty" }
    }
}
