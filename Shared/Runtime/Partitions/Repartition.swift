import FoundationEssentials
import Model
import Store
import TrackerLog

/// `tracker-{service} repartition --to Q`: moves a stopped service's stores
/// from the partitions they have (`tracker-{service}-p{k}.sqlite` for k in
/// 0..<P, or the unpartitioned `tracker-{service}.sqlite`) to Q, each device's
/// rows to its partition under Q (docs/scaling.md, "Changing partitions").
///
/// Every row of a table with a `device` (or `owner`) column goes where that
/// device goes; the fleet's own rows (`_fleet`) and tables of neither (the
/// uploader's sync config) go to every new store, from the first old one.
/// Each new store gets an identity of its own, and every input watermark
/// moved keeps its seq but forgets its producer's identity: the next
/// message from the producer's new store is taken as the same stream, not
/// as a reset. The new stores are written beside the old and take their
/// place at the end; the old are kept in `before-repartition-{time}/`.
public struct Repartition<Row> {
    let definition: ServiceDefinition<Row>
    let directory: String
    let target: Int
    let nowMs: Int64
    let logger: Logger

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
        init(_ text: String) { description = text }
    }

    /// What was moved: the stores before and after, rows per table.
    public struct Report: CustomStringConvertible {
        public var from: Int
        public var to: Int
        public var rows: [String: Int] = [:]
        /// Tables of no device, copied whole from the first old store to every new one.
        public var fleetWide: [String] = []
        public var kept: String = ""
        public var description: String {
            let tables = rows.keys.sorted().map { "\($0) \(rows[$0]!)" }.joined(separator: ", ")
            return "moved \(from) → \(to) partitions: \(tables) rows written; copied whole to every store: "
                + (fleetWide.isEmpty ? "none" : fleetWide.joined(separator: ", ")) + "; the old stores are in \(kept)"
        }
    }

    public init(definition: ServiceDefinition<Row>, directory: String, target: Int, nowMs: Int64, logger: Logger) {
        self.definition = definition; self.directory = directory; self.target = target; self.nowMs = nowMs; self.logger = logger
    }

    var service: String { definition.name }
    var unpartitionedName: String { "tracker-\(service).sqlite" }
    func partitionName(_ k: Int) -> String { "tracker-\(service)-p\(k).sqlite" }

    /// The partitions a list of stores stands for (the unpartitioned store is one).
    func count(of stores: [String]) -> Int { stores == [unpartitionedName] ? 1 : stores.count }

    /// The stores there are now: one unpartitioned, or P partitions' (0..<P, none missing).
    func sources() throws -> [String] {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        let prefix = "tracker-\(service)-p", suffix = ".sqlite"
        let partitions = files.compactMap { file -> Int? in
            guard file.hasPrefix(prefix), file.hasSuffix(suffix) else { return nil }
            return Int(file.dropFirst(prefix.count).dropLast(suffix.count))
        }.sorted()
        let unpartitioned = files.contains(unpartitionedName)
        if unpartitioned, !partitions.isEmpty {
            throw Failure("\(directory) holds both \(unpartitionedName) and partition stores: keep only the ones in use")
        }
        if unpartitioned { return [unpartitionedName] }
        guard !partitions.isEmpty else { throw Failure("\(directory) holds no store of \(service) (\(unpartitionedName) or \(prefix)0\(suffix) …)") }
        guard partitions == Array(0..<partitions.count) else {
            throw Failure("\(directory) holds the stores of partitions \(partitions.map(String.init).joined(separator: ", ")): one is missing")
        }
        return partitions.map(partitionName)
    }

    public func run() throws -> Report {
        let staging = Self.stagingPath(directory, service: service)
        if let data = FileManager.default.contents(atPath: "\(staging)/\(Self.swapFile)") {
            // An earlier run wrote the new stores and was stopped while moving files: finish that one first.
            let swap = try JSONCoding.decoder.decode(Swap.self, from: data)
            guard let lock = try StoreLock(path: "\(directory)/\(swap.targets[0]).lock") else {
                throw Failure("\(swap.targets[0]) is in use: stop every instance of \(service) first")
            }
            defer { lock.release() }
            try finish(swap, staging: staging)
            guard swap.targets.count == target else {
                throw Failure("finished the repartition an earlier run began (to \(swap.targets.count) stores; the old ones are in "
                              + "\(swap.kept)); run again to change the count once more")
            }
            var report = Report(from: count(of: swap.sources), to: target)
            report.kept = swap.kept
            return report
        }
        let sourceNames = try sources()
        let from = count(of: sourceNames)
        guard target != from else { throw Failure("\(service)'s stores have \(from) partition\(from == 1 ? "" : "s") already") }
        // No instance may run: each holds its partitions' locks and the ingress's (an unpartitioned one: see docs/scaling.md).
        let ingressName = "tracker-\(service)-in.sqlite"
        var locks: [StoreLock] = []
        defer { locks.forEach { $0.release() } }
        for name in Set(sourceNames + (0..<target).map(partitionName) + [ingressName]) {
            guard let lock = try StoreLock(path: "\(directory)/\(name).lock") else {
                throw Failure("\(name) is in use: stop every instance of \(service) first")
            }
            locks.append(lock)
        }
        try? FileManager.default.removeItem(atPath: staging)  // an earlier run's, stopped before its swap began
        try FileManager.default.createDirectory(atPath: staging, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        let targetNames = target == 1 ? [unpartitionedName] : (0..<target).map(partitionName)
        // Every store is closed again when this returns: only then are files moved.
        var report = try write(from: sourceNames, to: targetNames, in: staging, ingress: target > 1 ? "\(directory)/\(ingressName)" : nil)
        // Said before the first file moves: an interrupted swap is finished by the next run.
        let swap = Swap(sources: sourceNames, targets: targetNames, kept: "\(directory)/before-repartition-\(nowMs)")
        try JSONCoding.encode(swap).write(to: URL(fileURLWithPath: "\(staging)/\(Self.swapFile)"), options: .atomic)
        try finish(swap, staging: staging)
        report.kept = swap.kept
        logger.info("repartitioned", ["service": service, "from": "\(from)", "to": "\(target)", "kept": swap.kept])
        return report
    }

    /// The file moves that end a repartition, said in the staging directory
    /// before the first is made: the old stores (with their -wal and -shm)
    /// aside into `kept`, then the new ones in.
    struct Swap: Codable {
        var sources: [String]
        var targets: [String]
        var kept: String
    }

    static var swapFile: String { "swap.json" }

    static func stagingPath(_ directory: String, service: String) -> String { "\(directory)/repartition-\(service).tmp" }

    /// A swap a repartition began and did not finish (the service must not start on half of it).
    public static func interrupted(in directory: String, service: String) -> Bool {
        FileManager.default.fileExists(atPath: "\(stagingPath(directory, service: service))/\(swapFile)")
    }

    /// Finishes `swap`, however far an earlier run got: the old stores all
    /// go out before the first new one comes in, so while every new one is
    /// still staged the old ones left are moved aside, and after that only
    /// the new ones left are moved in.
    func finish(_ swap: Swap, staging: String) throws {
        let files = FileManager.default
        if !files.fileExists(atPath: swap.kept) {
            try files.createDirectory(atPath: swap.kept, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        }
        let staged = Set((try? files.contentsOfDirectory(atPath: staging)) ?? [])
        if swap.targets.allSatisfy(staged.contains) {
            let present = Set((try? files.contentsOfDirectory(atPath: directory)) ?? [])
            for name in swap.sources {
                for file in [name, name + "-wal", name + "-shm"] where present.contains(file) {
                    try files.moveItem(atPath: "\(directory)/\(file)", toPath: "\(swap.kept)/\(file)")
                }
            }
        }
        for name in swap.targets {
            for file in [name, name + "-wal", name + "-shm"] where staged.contains(file) {
                try files.moveItem(atPath: "\(staging)/\(file)", toPath: "\(directory)/\(file)")
            }
        }
        try files.removeItem(atPath: staging)
    }

    /// The new stores, written in `staging` from the old, in one transaction each.
    private func write(from sourceNames: [String], to targetNames: [String], in staging: String, ingress: String?) throws -> Report {
        let sources = try sourceNames.map { name in
            let db = try Database(path: "\(directory)/\(name)")
            try definition.migrate(db)  // this version's schema, as the service would make it at start
            return db
        }
        try refuseBatchesInFlight(sources, names: sourceNames)
        let targets = try targetNames.map { name in
            let db = try Database(path: "\(staging)/\(name)")
            try definition.migrate(db)
            try db.run("INSERT INTO host_identity (epoch, createdMs) VALUES (?, ?)", .text(UUID().uuidString.lowercased()), .integer(nowMs))
            return db
        }
        var report = Report(from: count(of: sourceNames), to: targetNames.count)
        let partitioning = Partitioning(count: targetNames.count)
        for db in targets { try db.execute("BEGIN") }
        for table in try tables(of: targets[0]) {
            report.rows[table.name] = try copy(table, from: sources, to: targets, partitioning: partitioning)
            if !table.columns.contains(where: { ["device", "owner"].contains($0.name) }) { report.fleetWide.append(table.name) }
        }
        for db in targets {
            try db.execute("COMMIT")
            try db.checkpoint()
        }
        if let ingress, let open = definition.ingressGate {
            // What must hold across partitions (the gateway's devices per account) starts from what the stores hold.
            let gate = try open(IngressGateContext(db: try Database(path: ingress), topics: Topics(), logger: logger))
            for db in targets { try gate.absorb(partitionStore: db) }
        }
        return report
    }

    /// An uploader that stopped with a batch sent and no answer would send
    /// it again under its key; split across partitions, the receiver would
    /// take a part for the whole. It must finish first.
    func refuseBatchesInFlight(_ sources: [Database], names: [String]) throws {
        for (db, name) in zip(sources, names) where try tableNames(db).contains("queue") {
            guard try columns(of: "queue", in: db).contains(where: { $0.name == "batch" }) else { continue }
            let waiting = try db.first("SELECT count(*) FROM queue WHERE batch IS NOT NULL AND parked = 0") { $0.int(0) } ?? 0
            if waiting > 0 {
                throw Failure("\(name) has \(waiting) points in a batch sent without an answer yet: start the uploader until "
                              + "syncNow answers, stop it, and repartition then")
            }
        }
    }

    struct Column { let name: String; let type: String; let pk: Int }
    struct Table { let name: String; let columns: [Column] }

    func tableNames(_ db: Database) throws -> [String] {
        try db.query("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid") { $0.string(0) }
    }

    func columns(of table: String, in db: Database) throws -> [Column] {
        try db.query("SELECT name, type, pk FROM pragma_table_info(?)", [.text(table)]) { Column(name: $0.string(0), type: $0.string(1), pk: $0.int(2)) }
    }

    /// The tables whose rows move: all but the migrations' record and the store's identity.
    func tables(of db: Database) throws -> [Table] {
        try tableNames(db).filter { !["_migrations", "host_identity"].contains($0) }.map { Table(name: $0, columns: try columns(of: $0, in: db)) }
    }

    /// Copies a table's rows to their new stores; returns how many were written.
    func copy(_ table: Table, from sources: [Database], to targets: [Database], partitioning: Partitioning) throws -> Int {
        // A lone INTEGER PRIMARY KEY is the rowid: left to the new store, which numbers rows as they come.
        let keys = table.columns.filter { $0.pk > 0 }
        let rowid = keys.count == 1 && keys[0].type.uppercased() == "INTEGER" ? keys[0].name : nil
        let columns = table.columns.map(\.name).filter { $0 != rowid }
        let owner = columns.contains("device") ? "device" : columns.contains("owner") ? "owner" : nil
        let list = columns.map { "\"\($0)\"" }.joined(separator: ", ")
        let inputs = table.name == "host_devices" ? columns.firstIndex(of: "inputs") : nil
        let inserts = try targets.map { try $0.prepare("INSERT INTO \"\(table.name)\" (\(list)) VALUES (\(columns.map { _ in "?" }.joined(separator: ", ")))") }
        // A table of neither is the fleet's as a whole: the first store's copy, in every new one (what the migrations put there replaced).
        if owner == nil { for db in targets { try db.run("DELETE FROM \"\(table.name)\"") } }
        var written = 0
        for (s, source) in sources.enumerated() {
            let order = rowid.map { " ORDER BY \"\($0)\"" } ?? ""
            let select = try source.prepare("SELECT \(list) FROM \"\(table.name)\"\(order)")
            let ownerIndex = owner.flatMap { columns.firstIndex(of: $0) }
            while let row = try select.step() {
                var values = (0..<columns.count).map { row.value(Int32($0)) }
                if let inputs { values[inputs] = try Self.forgettingProducers(values[inputs]) }
                let destinations: [Int]
                if let ownerIndex, case let id = String(decoding: Self.bytes(values[ownerIndex]), as: UTF8.self), !id.hasPrefix("_") {
                    destinations = [targets.count == 1 ? 0 : partitioning.partition(ofSegment: id)]
                } else {
                    // The fleet's rows (`_fleet`, and tables of neither): once, from the first store.
                    guard s == 0 else { continue }
                    destinations = Array(targets.indices)
                }
                for k in destinations {
                    try inserts[k].run(values)
                    written += 1
                }
            }
        }
        return written
    }

    /// Input watermarks with their seqs, and no producer epoch: the producer's
    /// store is a new one now, and its next message is taken as the same stream.
    static func forgettingProducers(_ value: SQLValue) throws -> SQLValue {
        let bytes = bytes(value)
        guard !bytes.isEmpty else { return value }
        var marks = try StoredInputs.restored(from: Data(bytes), using: JSONCoding.decoder).marks
        for name in marks.keys { marks[name]?.epoch = nil }
        return .blob(StoredInputs(marks).stored)
    }

    static func bytes(_ value: SQLValue) -> [UInt8] {
        switch value {
        case .blob(let b), .utf8(let b): b
        case .text(let t): Array(t.utf8)
        default: []
        }
    }
}
