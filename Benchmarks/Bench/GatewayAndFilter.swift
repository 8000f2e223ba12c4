import Bus
import Foundation
import Model
import TestSupport

/// The gateway and the filter on a private broker, both online, with a
/// collector of their health: what the memory and retention benches drive.
struct GatewayAndFilter {
    let broker: TestBroker
    let gateway: ServiceHarness
    let filter: ServiceHarness
    let health: MessageCollector

    static func start(gateway gatewayConfig: [String: Any], filter filterConfig: [String: Any]) async throws -> GatewayAndFilter {
        let broker = try TestBroker()
        let gateway = try ServiceHarness(executable: "tracker-gateway", broker: broker, config: gatewayConfig)
        let filter = try ServiceHarness(executable: "tracker-filter", broker: broker, config: filterConfig)
        try gateway.start()
        try filter.start()
        let health = try await MessageCollector(port: broker.port, filters: ["tracker/_health/+"])
        try await health.wait(timeout: 120, description: "both online") { all in
            Set(all.compactMap { try? JSONCoding.decoder.decode(Health.self, from: Data($0.payload)) }.map(\.service)).count == 2
        }
        return GatewayAndFilter(broker: broker, gateway: gateway, filter: filter, health: health)
    }

    func stop() { gateway.stop(); filter.stop() }

    /// Until the filter's health says it judged `count` fixes.
    func waitJudged(_ count: Int64) async throws {
        try await health.waitForHealth(timeout: 900, description: "the filter judged every fix") { $0.service == "filter" && $0.processed >= count }
    }

    /// Each service's newest health.
    var newestHealth: [String: Health] {
        Health.newestByService(health.newestHealth)
    }
}
