/// A command request on `tracker/{device}/cmd/{name}`.
public struct CommandRequest: Codable, Sendable, Equatable {
    public var id: JSONValue?
    public var args: JSONValue?
    public init(id: JSONValue? = nil, args: JSONValue? = nil) { self.id = id; self.args = args }
}

/// A command reply: `{"id":…,"ok":true,"result":…}` or `{"id":…,"ok":false,"code":…,"message":…}`.
public struct CommandReply: Codable, Sendable, Equatable {
    public var id: JSONValue?
    public var ok: Bool
    public var result: JSONValue?
    public var code: String?
    public var message: String?
    /// A page cut short to keep the reply small: ask again from this offset.
    public var nextOffset: Int?

    public static func success(id: JSONValue?, _ result: JSONValue) -> CommandReply {
        CommandReply(id: id, ok: true, result: result, code: nil, message: nil)
    }
    public static func failure(id: JSONValue?, _ error: CommandError) -> CommandReply {
        CommandReply(id: id, ok: false, result: nil, code: error.code.rawValue, message: error.message)
    }
}

/// The stable vocabulary of error codes, for command replies and `error` events.
public enum ErrorCode: String, Codable, Sendable {
    case badInput, notReady, notFound, limitReached, invalidConfig, conflict, `internal`
    /// Too many queries waiting already: try again later.
    case busy
    /// HTTP (tracker-http): no credentials, or ones the broker refused (401).
    case unauthorized
    /// HTTP: the broker's ACL denies the account this read or write (403).
    case forbidden
    /// HTTP: no service answered in time (504).
    case timeout
}

/// A command that failed, with a code from the stable vocabulary.
public struct CommandError: Error, Sendable, Equatable {
    public var code: ErrorCode
    public var message: String
    public init(_ code: ErrorCode, _ message: String) { self.code = code; self.message = message }
}

/// Which service answers which command. The gateway answers `notFound` for a
/// name in no one's list, so a typo gets a reply instead of a timeout.
public enum CommandCatalog {
    public static let gateway = ["start", "stop", "currentSession", "getSessions", "getRawFixes", "exportFixture", "repairRaw",
                                 "reportLocation", "getRegions"]
    public static let filter = ["getDecisions", "getRawPoints", "repairPoints"]
    public static let motion = ["changePace", "addGeofence", "removeGeofence", "removeAllGeofences",
                                "getGeofences", "getGeofenceEvents", "deleteGeofenceEvents",
                                "setActiveRoute", "isOffRoute", "getTrips", "getStops", "repairMotion"]
    public static let track = ["getPoints", "getCount", "getOdometer", "buildTrack", "exportGeoJSON",
                               "exportPolylineJSON", "exportGPX", "getSummary", "getLive"]
    public static let uploader = ["configureSync", "syncNow"]
    public static let all = Set(gateway + filter + motion + track + uploader)

    /// The commands one service answers, by the service's name.
    public static func owned(by service: String) -> [String] {
        switch service {
        case "gateway": gateway
        case "filter": filter
        case "motion": motion
        case "track": track
        case "uploader": uploader
        default: []
        }
    }
}

/// Paging arguments shared by the listing commands.
public struct PageArgs: Codable, Sendable {
    public var sessionID: String?
    public var limit: Int?
    public var offset: Int?
    public init(sessionID: String? = nil, limit: Int? = nil, offset: Int? = nil) {
        self.sessionID = sessionID; self.limit = limit; self.offset = offset
    }

    private enum CodingKeys: String, CodingKey { case sessionID, limit, offset }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        sessionID = try c.decodeIfPresent(String.self, forKey: .sessionID)
        limit = try c.decodeWholeNumberIfPresent(forKey: .limit)
        offset = try c.decodeWholeNumberIfPresent(forKey: .offset)
    }

    public static let maxLimit = 10_000
    public static let defaultLimit = 1_000

    /// Checked paging: limit 1…10,000 (default 1,000), offset ≥ 0.
    public func validated() throws(CommandError) -> (limit: Int, offset: Int) {
        let limit = self.limit ?? Self.defaultLimit
        let offset = self.offset ?? 0
        guard (1...Self.maxLimit).contains(limit) else {
            throw CommandError(.badInput, "limit must be 1…\(Self.maxLimit), got \(limit)")
        }
        guard offset >= 0 else { throw CommandError(.badInput, "offset must be ≥ 0, got \(offset)") }
        return (limit, offset)
    }
}

extension KeyedDecodingContainer {
    /// An integer argument, refused by name when it has a fraction or lies
    /// beyond ±2^53 (JSONDecoder alone says only "not valid JSON" for 1.5).
    public func decodeWholeNumberIfPresent(forKey key: Key) throws -> Int? {
        guard let value = try decodeIfPresent(Double.self, forKey: key) else { return nil }
        guard value.rounded() == value, abs(value) < 9_007_199_254_740_992 else {
            throw DecodingError.dataCorrupted(.init(codingPath: codingPath + [key],
                                                    debugDescription: "expected a whole number within ±2^53, got \(value)"))
        }
        return Int(value)
    }
}
