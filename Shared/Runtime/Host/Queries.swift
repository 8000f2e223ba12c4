import Bus
import FoundationEssentials
import TrackerLog
import Model
import Store
import Synchronization

/// Stored JSON documents returned as they are, as a reply's `result` array.
public struct JSONPage: Sendable {
    public var bodies: [String]
    /// Set when the page was cut short by the reply size bound.
    public var nextOffset: Int?
    public init(bodies: [String], nextOffset: Int?) { self.bodies = bodies; self.nextOffset = nextOffset }

    /// The bodies of a page that started at `offset`, cut short once they
    /// hold `maxBytes` (then `nextOffset` says where the next page starts).
    public init(bounding all: [String], offset: Int, maxBytes: Int) {
        var bound = ReplyBound(maxBytes: maxBytes)
        for (i, body) in all.enumerated() where !bound.admits(body.utf8.count) {
            self.init(bodies: Array(all[..<i]), nextOffset: offset + i)
            return
        }
        self.init(bodies: all, nextOffset: nil)
    }
}

/// How much of a reply's items fit in `maxReplyBytes`: each item as encoded
/// and its comma, the first always (a page never comes back empty).
public struct ReplyBound {
    private var bytes: Int
    private var admitted = 0
    private let maxBytes: Int

    /// `reserved`: bytes the reply needs beside its items (an object's other keys).
    public init(maxBytes: Int, reserved: Int = 0) { self.maxBytes = maxBytes; bytes = reserved }

    /// Whether an item of `size` bytes still fits; if so, it is counted in.
    public mutating func admits(_ size: Int) -> Bool {
        if admitted > 0, bytes + size + 1 > maxBytes { return false }
        bytes += size + 1
        admitted += 1
        return true
    }
}

/// What a query answers: any value, or a page of stored documents.
public enum QueryResult {
    case value(any Encodable)
    case page(JSONPage)
}

/// A query's view of the store: a read-only connection of its own, so a
/// query never waits for, or holds up, the messages being stored.
public final class QueryContext {
    public let device: DeviceID
    public let db: Database
    /// The most a reply may carry; pages stop short of it.
    public let maxReplyBytes: Int
    private let logs: (String) throws -> DeviceLog

    init(device: DeviceID, db: Database, maxReplyBytes: Int, logs: @escaping (String) throws -> DeviceLog) {
        self.device = device; self.db = db; self.maxReplyBytes = maxReplyBytes; self.logs = logs
    }

    /// One of the service's logs, read through this connection.
    public func log(_ table: String) throws -> DeviceLog { try logs(table) }

    /// A page of a log as the reply, bounded in items and bytes: the bodies,
    /// or one named part of each (`DeviceLog.page`).
    public func page(_ table: String, part: String? = nil, onlyWherePresent: Bool = false, sessionID: String?, limit: Int,
                     offset: Int) throws -> QueryResult {
        .page(try log(table).page(device, sessionID: sessionID, limit: limit, offset: offset, maxBytes: maxReplyBytes, part: part,
                                  onlyWherePresent: onlyWherePresent))
    }
}

/// Answers queries off the network thread: one task with its own read-only
/// connection reads them in turn, at most `capacity` waiting (beyond that
/// the reply is `busy` at once), replies bounded in bytes. Ingest never waits
/// for a query, however many arrive; a query that waits on something else
/// (`CommandRoute.waiting`) runs beside the reads, so they go on meanwhile.
final class QueryWorker: LongRunning {
    private struct Job: Sendable {
        let command: IncomingCommand
        let run: QueryJob
    }
    private let jobs: AsyncStream<Job>
    private let submitted: AsyncStream<Job>.Continuation
    private let pending = Mutex(0)
    let capacity: Int
    let maxReplyBytes: Int
    private let path: String
    private let bus: any MessageBus
    private let topics: Topics
    private let logger: Logger
    private let counters: HealthCounters

    init(path: String, capacity: Int, maxReplyBytes: Int, bus: any MessageBus, topics: Topics, logger: Logger, counters: HealthCounters) {
        self.path = path; self.capacity = capacity; self.maxReplyBytes = maxReplyBytes
        self.bus = bus; self.topics = topics; self.logger = logger; self.counters = counters
        (jobs, submitted) = AsyncStream.makeStream(of: Job.self)
    }

    /// Queues a query; false when `capacity` are waiting already, or the worker has stopped.
    func submit(_ command: IncomingCommand, _ run: QueryJob) -> Bool {
        let accepted = pending.withLock { n in
            guard n < capacity else { return false }
            n += 1
            return true
        }
        guard accepted else { return false }
        if case .terminated = submitted.yield(Job(command: command, run: run)) {
            pending.withLock { $0 -= 1 }
            return false
        }
        return true
    }

    /// Answers queries until stopped, then the ones already queued.
    func run() async {
        var connection: Connection?
        await withTaskGroup(of: Void.self) { waits in
            for await job in jobs {
                switch job.run {
                case .reads(let read):
                    answer(job.command) {
                        if connection == nil { connection = try Connection(path: path) }
                        return try read(job.command, connection!.context(for: job.command.device, maxReplyBytes: maxReplyBytes))
                    }
                case .waits(let wait):
                    waits.addTask { [self] in await answerAsync(job.command) { try await wait(job.command) } }
                }
            }
        }
    }

    /// Ends `run` once the queued queries are answered.
    func stop() { submitted.finish() }

    private func answer(_ command: IncomingCommand, _ body: () throws -> QueryResult) {
        publish(command, Result { try Self.reply(to: command, body()) })
    }

    private func answerAsync(_ command: IncomingCommand, _ body: () async throws -> QueryResult) async {
        do { publish(command, .success(try Self.reply(to: command, await body()))) } catch { publish(command, .failure(error)) }
    }

    private func publish(_ command: IncomingCommand, _ outcome: Result<[UInt8], any Error>) {
        defer { pending.withLock { $0 -= 1 } }
        let payload: [UInt8]
        switch outcome {
        case .success(let bytes): payload = bytes
        case .failure(let error as CommandError):
            payload = JSONCoding.bytes(CommandReply.failure(id: command.request.id, error))
        case .failure(let error):
            logger.error("query failed", ["command": command.name, "device": command.device.rawValue, "error": "\(error)"])
            payload = JSONCoding.bytes(CommandReply.failure(id: command.request.id, CommandError(.internal, "store failed: \(error)")))
        }
        counters.count("queries")
        let message = CommandReplyMessage(command, .success(id: command.request.id, .null)).message(topics, payload: payload)
        do { try bus.publish(message, acknowledged: nil) } catch {
            logger.warning("reply not published", ["mqtt.topic": message.topic, "error": "\(error)"])
        }
    }

    /// The worker's read-only connection and the logs opened on it; owned by `run`.
    private final class Connection {
        let db: Database
        var logs: [String: DeviceLog] = [:]
        init(path: String) throws { db = try Database(path: path, readOnly: true) }

        func context(for device: DeviceID, maxReplyBytes: Int) -> QueryContext {
            QueryContext(device: device, db: db, maxReplyBytes: maxReplyBytes) { [self] table in
                if let log = logs[table] { return log }
                let log = try DeviceLog(db: db, table: table)
                logs[table] = log
                return log
            }
        }
    }

    /// The reply's bytes: a page is spliced in as stored, never decoded and
    /// encoded again (keys in the order JSONEncoder sorts them).
    static func reply(to command: IncomingCommand, _ result: QueryResult) throws -> [UInt8] {
        switch result {
        case .value(let value):
            return JSONCoding.bytes(CommandReply.success(id: command.request.id, try JSONValue(encoding: value)))
        case .page(let page):
            var bytes: [UInt8] = []
            bytes.reserveCapacity(page.bodies.reduce(64) { $0 + $1.utf8.count + 1 })
            bytes += Array("{".utf8)
            if let id = command.request.id { bytes += Array(#""id":"#.utf8) + JSONCoding.bytes(id) + [UInt8(ascii: ",")] }
            if let next = page.nextOffset { bytes += Array(#""nextOffset":\#(next),"#.utf8) }
            bytes += Array(#""ok":true,"result":["#.utf8)
            for (i, body) in page.bodies.enumerated() {
                if i > 0 { bytes.append(UInt8(ascii: ",")) }
                bytes += body.utf8
            }
            bytes += Array("]}".utf8)
            return bytes
        }
    }
}
