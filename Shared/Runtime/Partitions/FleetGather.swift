import FoundationEssentials
import Model

/// How the partitions' replies to one `_fleet` command become the one reply
/// its asker gets (a partitioned service sends such a command to every
/// partition: each holds its share of the fleet).
public enum FleetReplies: Sendable {
    /// Every partition holds the same fleet state (the fleet's fences, the
    /// sync config): partition 0's answer.
    case same
    /// Each partition answers for its own devices: one result made of all
    /// of theirs, in partition order (counts summed, outcomes weighed).
    case combine(@Sendable (_ results: [JSONValue]) -> JSONValue)
    /// Each partition holds its share of a history, newest first by the
    /// number `key` of each item: one page of the whole history. Each
    /// partition is asked for its first `offset + limit` items.
    case newestFirst(by: String)
    /// Each partition answers `{items: […], next?}`: its items after the
    /// asker's cursor in the order of their text `key`, `next` when it
    /// stopped short. One page of the whole fleet, in that order, with
    /// `next` for the asker's next question.
    case inKeyOrder(items: String, key: String)
}

/// The `_fleet` commands a partitioned service's ingress sent to every
/// partition, waiting for their replies: a value type that says what to
/// publish, driven by the replies and the clock.
struct FleetGather {
    /// Where the merged reply goes: the asker's response topic and correlation data.
    struct Asker: Equatable {
        var topic: String
        var correlationData: [UInt8]?
    }

    /// The page a `newestFirst` or `inKeyOrder` command asked for, as the asker asked it.
    struct Page: Equatable {
        var limit: Int
        var offset: Int
    }

    /// A reply to publish to its asker.
    struct Answer {
        let asker: Asker
        let reply: CommandReply
    }

    private struct Pending {
        let asker: Asker
        let how: FleetReplies
        let page: Page?
        /// The request's `id`, for an answer no partition's reply carries (a timeout).
        let requestID: JSONValue?
        let deadlineMs: Int64
        var replies: [CommandReply?]
    }

    let partitions: Int
    /// How long a gather waits at least (one started with a longer wait gets that).
    let timeoutMs: Int64
    /// A reply's bound in bytes (a merged page stops short of it, as a partition's does).
    let maxReplyBytes: Int
    /// Gathers at once, at most: past it a fleet command is answered `busy`.
    let capacity: Int
    private var pending: [String: Pending] = [:]

    init(partitions: Int, timeoutMs: Int64, maxReplyBytes: Int, capacity: Int = 256) {
        self.partitions = partitions; self.timeoutMs = timeoutMs; self.maxReplyBytes = maxReplyBytes; self.capacity = capacity
    }

    var count: Int { pending.count }

    /// Starts waiting for every partition's reply to gather `id`; false
    /// (nothing started) when `capacity` gathers wait already.
    mutating func start(_ id: String, asker: Asker, how: FleetReplies, page: Page?, requestID: JSONValue? = nil, nowMs: Int64,
                        timeoutMs: Int64? = nil) -> Bool {
        guard pending.count < capacity else { return false }
        pending[id] = Pending(asker: asker, how: how, page: page, requestID: requestID, deadlineMs: nowMs + max(self.timeoutMs, timeoutMs ?? 0),
                              replies: Array(repeating: nil, count: partitions))
        return true
    }

    /// Partition `k`'s reply to gather `id`; the answer once every partition
    /// replied. A reply nobody waits for (an earlier ingress's, a repeat) is ignored.
    mutating func reply(_ id: String, partition k: Int, _ reply: CommandReply) -> Answer? {
        guard var gather = pending[id], gather.replies.indices.contains(k), gather.replies[k] == nil else { return nil }
        gather.replies[k] = reply
        let replies = gather.replies.compactMap { $0 }
        guard replies.count == partitions else { pending[id] = gather; return nil }
        pending[id] = nil
        return Answer(asker: gather.asker, reply: merge(replies, how: gather.how, page: gather.page))
    }

    /// The gathers past their deadline, each answered `timeout`: some
    /// partition's instance is gone and no other has taken it over yet.
    mutating func expire(nowMs: Int64) -> [Answer] {
        let due = pending.filter { $0.value.deadlineMs <= nowMs }
        for id in due.keys { pending[id] = nil }
        return due.values.map { gather in
            let missing = gather.replies.indices.filter { gather.replies[$0] == nil }
            let id = gather.requestID ?? gather.replies.lazy.compactMap { $0?.id }.first
            return Answer(asker: gather.asker, reply: .failure(id: id, CommandError(.timeout,
                "partitions \(missing.map(String.init).joined(separator: ", ")) of \(partitions) did not answer in time; "
                    + "what the command changes may hold on the others only: send it again")))
        }
    }

    /// One reply of all: the first failure if any partition failed, else the results merged.
    func merge(_ replies: [CommandReply], how: FleetReplies, page: Page?) -> CommandReply {
        let id = replies.first?.id
        if let failure = replies.first(where: { !$0.ok }) { return failure }
        switch how {
        case .same:
            return replies[0]
        case .combine(let combine):
            return .success(id: id, combine(replies.map { $0.result ?? .null }))
        case .newestFirst(let key):
            return mergePages(replies, key: key, page: page ?? Page(limit: PageArgs.defaultLimit, offset: 0))
        case .inKeyOrder(let itemsKey, let key):
            return mergeInKeyOrder(replies, items: itemsKey, key: key, limit: page?.limit ?? PageArgs.defaultLimit)
        }
    }

    /// Every partition's items merged in key order, exact up to the first
    /// item a partition stopped at (past it, that partition may hold more),
    /// then `limit` items and the reply's bound; `next` where it ends short.
    private func mergeInKeyOrder(_ replies: [CommandReply], items itemsKey: String, key: String, limit: Int) -> CommandReply {
        let id = replies.first?.id
        var items: [(key: String, item: JSONValue)] = []
        var stops: [String] = []
        for (k, reply) in replies.enumerated() {
            guard let list = reply.result?[itemsKey]?.arrayValue else {
                return .failure(id: id, CommandError(.internal, "partition \(k) answered something other than a page of '\(itemsKey)'"))
            }
            for (i, item) in list.enumerated() {
                guard let value = item[key]?.stringValue else {
                    return .failure(id: id, CommandError(.internal, "partition \(k)'s item \(i) has no text '\(key)'"))
                }
                items.append((value, item))
            }
            if let next = reply.result?["next"]?.stringValue { stops.append(next) }
        }
        items.sort { $0.key < $1.key }
        var next = stops.min()
        if let stop = next { items.removeAll { $0.key > stop } }
        var kept: [JSONValue] = []
        var bound = ReplyBound(maxBytes: maxReplyBytes, reserved: 64)
        for entry in items {
            guard kept.count < limit, bound.admits(JSONCoding.encode(entry.item).count) else {
                next = items[kept.count - 1].key
                break
            }
            kept.append(entry.item)
        }
        var page: [String: JSONValue] = [itemsKey: .array(kept)]
        if let next { page["next"] = .string(next) }
        return .success(id: id, .object(page))
    }

    /// Every partition's first `offset + limit` items, newest first, merged;
    /// then the asker's page of them. A partition whose page was cut short
    /// by its reply bound (`nextOffset`) may hold newer items than the next
    /// one of another: the merge is exact only up to its last item.
    private func mergePages(_ replies: [CommandReply], key: String, page: Page) -> CommandReply {
        let id = replies.first?.id
        var items: [(value: Double, k: Int, i: Int, item: JSONValue)] = []
        var left: [Int] = []
        for (k, reply) in replies.enumerated() {
            guard case .array(let list) = reply.result ?? .null else {
                return .failure(id: id, CommandError(.internal, "partition \(k) answered something other than a page"))
            }
            left.append(list.count)
            for (i, item) in list.enumerated() {
                guard case .object(let fields) = item, case .number(let value) = fields[key] ?? .null else {
                    return .failure(id: id, CommandError(.internal, "partition \(k)'s item \(i) has no number '\(key)'"))
                }
                items.append((value, k, i, item))
            }
        }
        items.sort { ($0.value, -$0.k, -$0.i) > ($1.value, -$1.k, -$1.i) }
        // The merged history is exact up to the last item of the first partition that was cut short.
        var exact = items.count
        for (n, entry) in items.enumerated() {
            left[entry.k] -= 1
            if left[entry.k] == 0, replies[entry.k].nextOffset != nil { exact = n + 1; break }
        }
        let end = min(exact, page.offset + page.limit)
        guard page.offset < end || exact == items.count else {
            return .failure(id: id, CommandError(.badInput,
                "offset \(page.offset): the fleet's history across \(partitions) partitions reaches past one reply of each "
                    + "(maxReplyBytes) there; ask with a smaller offset + limit"))
        }
        let chosen = page.offset < end ? items[page.offset..<end].map(\.item) : []
        // Bounded as a partition's own page is.
        var bound = ReplyBound(maxBytes: maxReplyBytes)
        var kept: [JSONValue] = []
        for item in chosen {
            guard bound.admits(JSONCoding.encode(item).count) else { break }
            kept.append(item)
        }
        var reply = CommandReply.success(id: id, .array(kept))
        if kept.count < chosen.count || (end < page.offset + page.limit && exact < items.count) {
            reply.nextOffset = page.offset + kept.count
        }
        return reply
    }
}

extension FleetReplies {
    /// The numbers summed: a count each partition made of its own devices.
    public static let sum = FleetReplies.combine { results in
        .number(results.reduce(0) { total, result in if case .number(let n) = result { total + n } else { total } })
    }

    /// True if any partition said true (`removeGeofence`: it was there).
    public static let anyTrue = FleetReplies.combine { results in .bool(results.contains(.bool(true))) }

    /// The largest number: a count of the fleet's state, which every
    /// partition holds the same (and, should one lag, the one that had most).
    public static let largest = FleetReplies.combine { results in
        .number(results.reduce(0) { most, result in if case .number(let n) = result { Swift.max(most, n) } else { most } })
    }
}
