import Model
@testable import Runtime
import Testing

@Suite struct AckTrackerTests {
    let device = DeviceID("p1")!

    @Test func watermarkWaitsForTheOldestUnacknowledged() {
        let tracker = AckTracker()
        tracker.restore(device, ackedThrough: 10)
        for seq in 11...15 { tracker.sent(device, Int64(seq)) }
        tracker.acknowledged(device, 12)
        tracker.acknowledged(device, 13)
        #expect(tracker.ackedThrough(device) == 10)  // 11 still out
        tracker.acknowledged(device, 11)
        #expect(tracker.ackedThrough(device) == 13)
        #expect(tracker.pendingCount == 2)
        tracker.acknowledged(device, 15)
        tracker.acknowledged(device, 14)
        #expect(tracker.ackedThrough(device) == 15 && tracker.pendingCount == 0)
    }

    @Test func onlyAdvancedWatermarksAreSavedAgain() {
        let tracker = AckTracker()
        tracker.restore(device, ackedThrough: 5)
        #expect(tracker.takeUnsaved().isEmpty)
        tracker.sent(device, 6)
        tracker.acknowledged(device, 6)
        let moved = tracker.takeUnsaved()
        #expect(moved.count == 1 && moved[0].1 == 6)
        #expect(tracker.takeUnsaved().isEmpty)
        tracker.unsave(moved)  // the write failed: it must be offered again
        #expect(tracker.takeUnsaved().map(\.1) == [6])
    }
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

    @Test func unknownKeysAreRefused() throws {
        let r = try reader(["mqttHost": .string("h"), "ringCapacty": .number(5)])
        _ = try CommonSettings(service: "gateway", r)
        #expect { try r.rejectUnknownKeys() } throws: { ($0 as? ConfigError)?.setting == "ringCapacty" }
    }
}
