/// The internal streams between the services: each has one producer, which
/// numbers every message per device and keeps them in its outbox log, and
/// answers `repair{Stream}` with a range of that log.
public enum InternalStream: String, Sendable, CaseIterable {
    case raw, points, motion

    /// The service that publishes it.
    public var producer: String {
        switch self {
        case .raw: "gateway"
        case .points: "filter"
        case .motion: "motion"
        }
    }

    /// The command its producer answers with a range of its log.
    public var repairCommand: String {
        switch self {
        case .raw: "repairRaw"
        case .points: "repairPoints"
        case .motion: "repairMotion"
        }
    }

    /// The stream a service produces, if any.
    public static func produced(by service: String) -> InternalStream? {
        allCases.first { $0.producer == service }
    }
}

/// `repair{Stream}`'s arguments: the stored messages of the command's device
/// with `after < seq ≤ through`, from the producer's store `epoch`.
public struct RepairRequest: Codable, Sendable, Equatable {
    public var epoch: String
    public var after: Int64
    public var through: Int64
    public init(epoch: String, after: Int64, through: Int64) { self.epoch = epoch; self.after = after; self.through = through }
}

extension Topics {
    /// Where a consumer instance receives the answers to its repair requests.
    public func repairReply(_ instance: String) -> String { "\(prefix)/_repair/reply/\(instance)" }
}
