import Bus
import FoundationEssentials
import Model
import Store

/// A service as the host runs it: a pure core behind a small table — which
/// topics it consumes and how each becomes a core input, which commands it
/// answers, its periodic sweep, its tables. The host does the rest once for
/// every service: batches and savepoints, the per-device cache, seq
/// deduplication, the outbox, error events, replies, health.
public struct ServiceDefinition<Row> {
    public var name: String
    /// The service's own tables, by name, each applied once (after the host's).
    public var migrations: [(name: String, sql: String)]
    public var rows: RowCodec<Row>
    /// Builds the routes once the database is open and migrated.
    public var wire: (Database) throws -> Routes<Row>
    /// Where the service is partitioned: what its ingress checks before it
    /// forwards, opened on the ingress's own store (nil: everything is forwarded).
    public var ingressGate: ((IngressGateContext) throws -> any IngressGate)?

    public init(name: String, migrations: [(name: String, sql: String)], rows: RowCodec<Row>,
                wire: @escaping (Database) throws -> Routes<Row>) {
        self.name = name; self.migrations = migrations; self.rows = rows; self.wire = wire
    }
}

extension ServiceDefinition {
    /// Gives `db` the host's tables and the service's own.
    func migrate(_ db: Database) throws {
        var migrator = Migrator()
        for (name, sql) in HostStore.migrations + migrations { migrator.register(name, sql) }
        try migrator.migrate(db)
    }

    /// The routes on a throwaway in-memory store: what the service reads and
    /// answers, known without running it (a partitioned instance's ingress).
    func routesAlone() throws -> Routes<Row> {
        let db = try Database(path: ":memory:")
        try migrate(db)
        return try wire(db)
    }
}

/// What the service does with messages, commands and time.
public struct Routes<Row> {
    public var inputs: [InputRoute<Row>]
    public var commands: [CommandRoute<Row>]
    /// The log whose entries are published on an internal topic (at most one).
    public var outbox: OutboxRoute?
    /// Logs trimmed per device by the host (an outbox never below what the broker acknowledged).
    public var retention: [LogRetention]
    public var sweep: SweepRoute<Row>?
    /// Answer `notFound` for a command name no service owns (one service does: the gateway).
    public var answersUnknownCommands: Bool
    /// Called when a batch is rolled back: a service that keeps anything of
    /// the store in memory besides the rows drops it here.
    public var batchAbandoned: (() -> Void)?
    /// A service's own worker beside the host (the uploader's HTTP loop):
    /// started with the host's bus and health counters, stopped at close.
    public var worker: ServiceWorker?
    /// The row a device starts over with when its stored one cannot be read
    /// (damaged, or written by a newer release), given the newest seq its
    /// outbox sent; nil: a fresh row. Required with an outbox (the host
    /// refuses one without it): a producer numbers on from that seq, or its
    /// consumers would skip what it sends next as already applied.
    public var startOver: ((_ device: DeviceID, _ lastSent: Int64) throws -> Row)?

    public init(inputs: [InputRoute<Row>], commands: [CommandRoute<Row>], outbox: OutboxRoute? = nil,
                retention: [LogRetention] = [], sweep: SweepRoute<Row>? = nil, answersUnknownCommands: Bool = false,
                batchAbandoned: (() -> Void)? = nil, worker: ServiceWorker? = nil,
                startOver: ((_ device: DeviceID, _ lastSent: Int64) throws -> Row)? = nil) {
        self.inputs = inputs; self.commands = commands; self.outbox = outbox; self.retention = retention
        self.sweep = sweep; self.answersUnknownCommands = answersUnknownCommands; self.batchAbandoned = batchAbandoned
        self.worker = worker; self.startOver = startOver
    }
}

extension Routes {
    /// The commands it answers: every name, for the service that answers unknown ones.
    func commandFilters(_ topics: Topics) -> [String] {
        answersUnknownCommands ? [topics.anyCommand] : commands.map { topics.allCommands(named: $0.name) }
    }

    /// What reaches a partitioned service from outside, on the contract's
    /// topics, for its ingress to forward to the device's partition: its
    /// inputs from devices and other services' events, and its commands.
    /// (The internal streams come partitioned already.)
    func forwardedFilters(_ topics: Topics) -> [(filter: String, wanted: (([UInt8]) -> Bool)?)] {
        inputs.filter { !$0.sequenced }.map { ($0.filter(topics), $0.wanted) } + commandFilters(topics).map { ($0, nil) }
    }

    /// Whether a command of this name is this service's to answer: its own,
    /// or, for the service that answers unknown ones, any no service owns.
    func answers(command name: String) -> Bool {
        commands.contains { $0.name == name } || (answersUnknownCommands && !CommandCatalog.all.contains(name))
    }

    /// How the partitions' replies to `name` for `_fleet` become one.
    func fleetReplies(command name: String) -> (how: FleetReplies, timeoutMs: Int64?) {
        let route = commands.first { $0.name == name }
        return (route?.fleetReplies ?? .same, route?.fleetReplyTimeoutMs)
    }
}

/// Work a service does off the network thread, for the life of the host.
public struct ServiceWorker {
    /// Makes the part, given the bus it publishes on and the counters health reads.
    public var make: (_ bus: any MessageBus, _ counters: HealthCounters) -> any LongRunning
    public init(_ make: @escaping (any MessageBus, HealthCounters) -> any LongRunning) { self.make = make }
}

/// How a device's row is stored: one document per device in the host's
/// table, JSON (as text, which SQL's json functions read) or a binary form
/// of the service's own (as a blob).
public struct RowCodec<Row> {
    public var fresh: () -> Row
    public var encode: (Row) -> [UInt8]
    /// The row, and a warning to log when it had to be rebuilt (an older version's).
    public var decode: (Data) throws -> (row: Row, warning: String?)
    /// `encode` writes a binary form, not JSON.
    public var binary: Bool

    public init(fresh: @escaping () -> Row, encode: @escaping (Row) -> [UInt8],
                decode: @escaping (Data) throws -> (row: Row, warning: String?), binary: Bool = false) {
        self.fresh = fresh; self.encode = encode; self.decode = decode; self.binary = binary
    }
}

extension RowCodec where Row: Codable {
    /// Rows stored as JSON: written by `JSONCoding.stored`, read by JSONDecoder.
    public static func json(fresh: @escaping () -> Row) -> RowCodec {
        RowCodec(fresh: fresh, encode: { JSONCoding.stored($0) },
                 decode: { (try JSONCoding.decoder.decode(Row.self, from: $0), nil) })
    }
}

extension RowCodec where Row: BinaryStoredRow {
    /// Rows in their binary form (JSON rows of earlier releases still read).
    public static func binary(fresh: @escaping () -> Row) -> RowCodec {
        RowCodec(fresh: fresh, encode: { $0.stored }, decode: { (try Row.restored(from: $0, using: JSONCoding.decoder), nil) }, binary: true)
    }
}

/// The outbox: a log whose entries are the messages on an internal topic.
public struct OutboxRoute {
    public let log: DeviceLog
    public let topic: @Sendable (Topics, DeviceID) -> String
    public init(log: DeviceLog, topic: @escaping @Sendable (Topics, DeviceID) -> String) { self.log = log; self.topic = topic }
}

extension RawFix: Sequenced {}
extension PointMessage: Sequenced {}
extension MotionMessage: Sequenced {}

/// An internal message numbered by its producer: `(epoch, seq)`.
public protocol Sequenced {
    var seq: Int64 { get }
    /// The producer's store identity; a new one means the producer started
    /// over and its numbering with it.
    var epoch: String? { get }
    /// The seq of the producer's message before this one for the same device
    /// (0 before the first); nil from producers that do not say.
    var prev: Int64? { get }
}

extension Sequenced {
    public var prev: Int64? { nil }
}

/// One subscribed topic kind and what it becomes for the core.
public struct InputRoute<Row> {
    /// The topic's last level (`fixes`, `raw`, `points`, `motion`, …); also the
    /// name of the input's seq watermark.
    public let name: String
    let filter: (Topics) -> String
    /// Whether the host keeps a seq watermark for this input.
    let sequenced: Bool
    /// Whether a payload concerns the service at all, judged before any work
    /// (a device's row is not even loaded for a message it ignores).
    var wanted: (([UInt8]) -> Bool)?
    let run: (MQTTMessage, Work<Row>) throws -> Void

    /// A message from outside (a device, OwnTracks): no seq of ours. With
    /// `when`, only payloads it admits are applied; the rest are acknowledged unread.
    public static func external(_ name: String, filter: @escaping (Topics) -> String, when wanted: (([UInt8]) -> Bool)? = nil,
                                apply: @escaping (MQTTMessage, Work<Row>) throws -> Void) -> InputRoute {
        InputRoute(name: name, filter: filter, sequenced: false, wanted: wanted, run: apply)
    }

    /// An internal message on `{prefix}/+/{name}`: the host applies each
    /// seq once per producer epoch, whatever the broker redelivers.
    public static func sequenced<M: Sequenced>(_ name: String, decode: @escaping ([UInt8]) throws -> M,
                                               apply: @escaping (M, Work<Row>) throws -> Void) -> InputRoute {
        InputRoute(name: name, filter: { "\($0.prefix)/+/\(name)" }, sequenced: true, wanted: nil) { message, work in
            let decoded: M
            do {
                decoded = try decode(message.payload)
            } catch {
                throw InputRefusal(.badInput, "\(name): unreadable internal message: \(DecodingErrorText.describe(any: error))")
            }
            guard try work.admit(decoded) else { throw Redelivered() }
            try apply(decoded, work)
        }
    }
}

/// A command the service answers: on the network thread within the batch
/// (it changes a device's row, or reads it), or as a query off that thread.
public struct CommandRoute<Row> {
    public enum Scope: Sendable { case device, fleet, any }
    public typealias Query = @Sendable (IncomingCommand, QueryContext) throws -> QueryResult
    public typealias Wait = @Sendable (IncomingCommand) async throws -> QueryResult

    enum Kind {
        case inline((IncomingCommand, Work<Row>) throws -> any Encodable)
        case query(QueryJob)
    }

    public let name: String
    public let scope: Scope
    let kind: Kind
    /// How the partitions' replies to this command for `_fleet` become one,
    /// where the service is partitioned (`.same` unless the route says).
    public private(set) var fleetReplies = FleetReplies.same
    /// How long the partitions may take to answer it for `_fleet`, beyond the usual (a command that waits).
    public private(set) var fleetReplyTimeoutMs: Int64?

    /// A command that changes (or reads) a device's row; it shares the batch
    /// of the messages, so keep it short.
    public init(_ name: String, scope: Scope = .device, run: @escaping (IncomingCommand, Work<Row>) throws -> any Encodable) {
        self.name = name; self.scope = scope; self.kind = .inline(run)
    }

    /// A read of stored data: answered by the query worker on its own
    /// connection, never on the network thread, bounded in bytes.
    public static func query(_ name: String, scope: Scope = .device, _ run: @escaping Query) -> CommandRoute {
        CommandRoute(name: name, scope: scope, kind: .query(.reads(run)))
    }

    /// A command answered once something outside the store is done (the
    /// uploader's `syncNow` waits for an upload attempt): it runs beside the
    /// query worker's reads, so other queries go on while it waits.
    public static func waiting(_ name: String, scope: Scope = .device, _ run: @escaping Wait) -> CommandRoute {
        CommandRoute(name: name, scope: scope, kind: .query(.waits(run)))
    }

    private init(name: String, scope: Scope, kind: Kind) { self.name = name; self.scope = scope; self.kind = kind }

    /// This route, its `_fleet` replies merged across partitions as `how` says
    /// (waited for `withinMs` at least, for a command that waits itself).
    public func mergingFleetReplies(_ how: FleetReplies, withinMs: Int64? = nil) -> CommandRoute {
        var route = self
        route.fleetReplies = how
        route.fleetReplyTimeoutMs = withinMs
        return route
    }
}

/// What the query worker runs for a command: a read of the store, or a wait.
enum QueryJob: Sendable {
    case reads(@Sendable (IncomingCommand, QueryContext) throws -> QueryResult)
    case waits(@Sendable (IncomingCommand) async throws -> QueryResult)
}

/// Periodic work, `every` so often: which devices to look at (from the
/// store, so evicted devices are not forgotten), and what to do with each.
public struct SweepRoute<Row> {
    public let every: Duration
    public let candidates: (_ nowMs: Int64) throws -> [DeviceID]
    public let apply: (Work<Row>) throws -> Void
    public init(every: Duration, candidates: @escaping (Int64) throws -> [DeviceID], apply: @escaping (Work<Row>) throws -> Void) {
        self.every = every; self.candidates = candidates; self.apply = apply
    }
}

/// A message the service refuses for what it says (not for a store failure):
/// its changes are undone and an `error` event with `code` names the problem.
public struct InputRefusal: Error, Sendable {
    public let code: ErrorCode
    public let message: String
    /// False for a refusal already announced (the same device refused again): counted, not repeated.
    public let announce: Bool
    public init(_ code: ErrorCode, _ message: String, announce: Bool = true) {
        self.code = code; self.message = message; self.announce = announce
    }
}

/// A sequenced message at or below the seq already applied.
struct Redelivered: Error {}
