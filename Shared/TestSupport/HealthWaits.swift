import Bus
import Foundation
import Model

extension Health {
    /// One instance a service (unpartitioned): the newest health of each
    /// service among the newest of each instance.
    public static func newestByService(_ newest: [String: Health]) -> [String: Health] {
        Dictionary(newest.values.map { ($0.service, $0) }, uniquingKeysWith: { $0.timeMs >= $1.timeMs ? $0 : $1 })
    }
}

extension TestBroker {
    /// Waits until each named service (`"gateway"`, `"filter"` …) has said
    /// `online` in its health on this broker: it is subscribed by then.
    public func waitUntilOnline(_ services: String..., timeout: Double = 20) async throws {
        let names = Set(services)
        let health = try await MessageCollector(port: port, filters: ["tracker/_health/+"])
        try await health.waitForNewestHealth(timeout: timeout, description: "\(names.sorted().joined(separator: ", ")) online") { newest in
            names.isSubset(of: newest.values.filter { $0.status == .online }.map(\.service))
        }
        await health.close()
    }

    /// Waits until a health message of `service` on this broker satisfies `condition`; returns it.
    @discardableResult
    public func waitForHealth(_ service: String, timeout: Double = 20, description: String,
                              until condition: @escaping @Sendable (Health) -> Bool) async throws -> Health {
        let health = try await MessageCollector(port: port, filters: ["tracker/_health/\(service)"])
        defer { Task { await health.close() } }
        return try await health.waitForHealth(timeout: timeout, description: description, until: condition)
    }
}

extension Health {
    /// A health message's payload decoded, or nil when it is not one.
    @Sendable public static func decode(_ message: MQTTMessage) -> Health? {
        // Not a health message (a test's own probe, a forged payload): skipped, as the waits skip it.
        try? JSONCoding.decoder.decode(Health.self, from: Data(message.payload))
    }

    /// The fixes a filter judged since it started: its accepted and rejected counters.
    public var judged: Int64 { (counters?["accepted"] ?? 0) + (counters?["rejected"] ?? 0) }
}
