import Bus
import Foundation
import TrackerLog
import Model
@testable import Runtime
import TestSupport

extension ServiceHost {
    /// A service on the host in process, as the host tests run it: a
    /// recording bus, a manual clock, logs off.
    static func inProcess(_ definition: ServiceDefinition<Row>, path: String, bus: RecordingBus, clock: ManualClock,
                          topics: Topics = Topics(), counters: HealthCounters = HealthCounters()) throws -> ServiceHost<Row> {
        try ServiceHost(definition, databasePath: path, bus: bus, topics: topics, logger: Logger(label: "test", minimum: .off),
                        counters: counters, clock: clock).runningParts()
    }
}

extension SettingsReader {
    /// Settings as a test gives them (none: every default).
    static func test(_ values: [String: JSONValue] = [:]) -> SettingsReader {
        SettingsReader(values: values, source: "test")
    }
}
