import Bus
import Foundation
import Model
import Synchronization
import TrackerLog

/// What reaches a partitioned service on the contract's topics (a device's
/// fixes, OwnTracks messages, commands, another service's events), taken by
/// the service's ingress session and published again under the device's
/// partition, where its owner reads. The batch it came in is acknowledged
/// only once the broker holds every copy, so a message taken is never lost
/// with the instance.
final class Forwarder: @unchecked Sendable {
    /// A contract filter the ingress subscribes to, its levels split once,
    /// and the payload test of the input it stands for.
    struct Filter {
        let filter: String
        let levels: [Substring]
        let wanted: (([UInt8]) -> Bool)?
    }
    let topics: Topics
    let partitioning: Partitioning
    let output: MQTTClient
    let logger: Logger
    let filters: [Filter]
    /// Whether a command name is this service's (another's is forwarded by that service's ingress).
    let answers: (String) -> Bool
    private let unacknowledged = Unacknowledged()

    init<Row>(routes: Routes<Row>, topics: Topics, partitioning: Partitioning, output: MQTTClient, logger: Logger) {
        self.topics = topics; self.partitioning = partitioning; self.output = output; self.logger = logger
        filters = routes.forwardedFilters(topics).map {
            Filter(filter: $0.filter, levels: $0.filter.split(separator: "/", omittingEmptySubsequences: false), wanted: $0.wanted)
        }
        answers = { routes.answers(command: $0) }
    }

    /// On the ingress connection's network thread.
    func forward(_ message: MQTTMessage) {
        let levels = message.topic.split(separator: "/", omittingEmptySubsequences: false)
        guard let match = filters.first(where: { Self.matches($0.levels, levels) }) else { return }
        if let wanted = match.wanted, !wanted(message.payload) { return }
        if case .command(let device, let name) = topics.parse(message.topic) {
            guard answers(name) else { return }  // another service's: its own instances forward it
            if device == .fleet {
                // Every partition holds its share of the fleet's state; the first answers.
                for k in 0..<partitioning.count { send(message, to: k, replying: k == 0) }
                return
            }
        }
        send(message, to: topics.partition(ofTopic: message.topic, in: partitioning) ?? 0, replying: true)
    }

    private func send(_ message: MQTTMessage, to k: Int, replying: Bool) {
        guard let topic = topics.underPartition(k, message.topic) else { return }
        var copy = MQTTMessage(topic: topic, payload: message.payload, qos: .atLeastOnce)
        if replying { copy.responseTopic = message.responseTopic; copy.correlationData = message.correlationData }
        unacknowledged.add()
        do {
            try output.publish(copy) { [unacknowledged, logger] result in
                if case .failure(let error) = result { logger.warning("a forwarded message was refused", ["error": "\(error)"]) }
                unacknowledged.remove()
            }
        } catch {
            unacknowledged.remove()
            logger.warning("a message could not be forwarded", ["mqtt.topic": topic, "error": "\(error)"])
        }
    }

    /// Before the batch is acknowledged: true once the broker holds every
    /// copy; false after 10 s, and the batch comes again.
    func waitForwarded() -> Bool { unacknowledged.waitForNone(timeout: 10) }

    /// MQTT topic filter matching (`+` one level, `#` the rest), on levels.
    static func matches(_ filter: [Substring], _ topic: [Substring]) -> Bool {
        var f = filter[...]
        var t = topic[...]
        while let level = f.first {
            if level == "#" { return true }
            guard let name = t.first, level == "+" || level == name else { return false }
            f = f.dropFirst(); t = t.dropFirst()
        }
        return t.isEmpty
    }
}

/// A count of messages the broker has not acknowledged yet, to wait on.
final class Unacknowledged: @unchecked Sendable {
    private let condition = NSCondition()
    private var count = 0

    func add() { condition.lock(); count += 1; condition.unlock() }

    func remove() {
        condition.lock()
        count -= 1
        if count == 0 { condition.broadcast() }
        condition.unlock()
    }

    func waitForNone(timeout seconds: Double) -> Bool {
        let deadline = Date(timeIntervalSinceNow: seconds)
        condition.lock()
        defer { condition.unlock() }
        while count > 0 { if !condition.wait(until: deadline) { return count == 0 } }
        return true
    }
}
