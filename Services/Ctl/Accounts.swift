import Foundation
import Model

// `trackerctl accounts`: what it keeps (the registry) and what that means
// for the broker (the generated part of the ACL). No I/O here; the command
// and the files are in AccountsCommand.swift.

/// A refusal or failure of `trackerctl accounts`, one line. Refusals (bad
/// input, exit 2) leave every file as it was.
struct AccountsError: Error, CustomStringConvertible {
    let description: String
    let code: Int32
    static func refused(_ message: String) -> AccountsError { AccountsError(description: message, code: 2) }
    static func failed(_ message: String) -> AccountsError { AccountsError(description: message, code: 1) }
}

enum AccountKind: String, Codable, CaseIterable, Sendable {
    /// `token`: a device's ingest token for tracker-http (Traccar Client), the login `ingest.{device}`.
    case device, map, `operator`, token

    /// Devices, map pages and tokens log in on the devices', the map's and
    /// tracker-http's listeners, operators only on the operators' one
    /// (config/mosquitto-logins.conf).
    var passwordFile: String { self == .operator ? "operators" : "passwords" }
}

/// What a login or a name may be. The ACL file is line-based and mosquitto
/// trims each line, so everything that reaches it is checked here first.
enum AccountRules {
    static let services = ["tracker-gateway", "tracker-filter", "tracker-motion", "tracker-track", "tracker-uploader"]
    /// The deployment's own accounts (config/acl names them): never managed by this tool.
    static let reservedLogins: Set<String> = Set(services + services.map { $0 + "-out" } + ["trackerctl", "tracker-map", "tracker-http"])
    /// The OwnTracks user under which the track service publishes every device's position to its friends.
    static let trackerUser = "_tracker"
    /// Logins starting with this are ingest tokens' (`ingest.{device}`, tracker-http's `IngestToken`), and only theirs.
    static let tokenLoginPrefix = "ingest."
    /// A token is `{device}~{secret}`; tracker-http takes a secret of at least this many URL-safe characters.
    static let tokenSeparator = "~"
    static let minimumTokenSecretLength = 32

    /// The broker login of a device's ingest token.
    static func tokenLogin(for device: DeviceID) -> String { tokenLoginPrefix + device.rawValue }

    /// A login this tool adds as a device, map page or operator: valid, and not a token's.
    static func checkAccountLogin(_ login: String) throws {
        try checkLogin(login)
        guard !login.hasPrefix(tokenLoginPrefix) else {
            throw AccountsError.refused("login '\(login)' is reserved: logins starting with '\(tokenLoginPrefix)' are ingest tokens' (add token DEVICE)")
        }
    }

    /// The device an ingest token is for: a Tracker device id, not one of the deployment's own accounts.
    static func tokenDevice(_ text: String) throws -> DeviceID {
        guard let id = DeviceID(text) else {
            throw AccountsError.refused("token device '\(printable(text))' is not a device id: 1–64 characters of A-Z a-z 0-9 . _ -, not starting with _")
        }
        guard !reservedLogins.contains(text) else {
            throw AccountsError.refused("token device '\(text)' is reserved: it is one of the deployment's own accounts (config/acl)")
        }
        return id
    }

    static func checkLogin(_ login: String) throws {
        let allowed = login.utf8.allSatisfy { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
                || b == UInt8(ascii: ".") || b == UInt8(ascii: "_") || b == UInt8(ascii: "-") || b == UInt8(ascii: "@")
        }
        guard (1...64).contains(login.utf8.count), allowed, !login.hasPrefix("_"), !login.hasPrefix("-") else {
            throw AccountsError.refused("login '\(printable(login))' is not valid: 1–64 characters of A-Z a-z 0-9 . _ - @, not starting with _ or -")
        }
        guard !reservedLogins.contains(login) else {
            throw AccountsError.refused("login '\(login)' is reserved: it is one of the deployment's own accounts (config/acl)")
        }
    }

    static func checkTeamName(_ name: String) throws {
        let allowed = name.utf8.allSatisfy { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
                || b == UInt8(ascii: ".") || b == UInt8(ascii: "_") || b == UInt8(ascii: "-")
        }
        guard (1...64).contains(name.utf8.count), allowed else {
            throw AccountsError.refused("team name '\(printable(name))' is not valid: 1–64 characters of A-Z a-z 0-9 . _ -")
        }
    }

    /// One part of an OwnTracks `USER/DEVICE`: a topic level of its own in
    /// every ACL line it reaches (so no `+`, `#` or `/`), on one line (no
    /// control characters), and not trimmed by mosquitto (no space at either end).
    static func checkOwnTracksPart(_ value: String, part: String, of text: String) throws {
        let problem: String?
        if value.isEmpty { problem = "is empty" }
        else if value.contains("/") { problem = "contains '/' (only one separates USER from DEVICE)" }
        else if value.contains("+") || value.contains("#") { problem = "contains an MQTT wildcard ('+' or '#')" }
        else if value.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) { problem = "contains a control character (a NUL, a newline …)" }
        else if value.hasPrefix(" ") || value.hasSuffix(" ") { problem = "starts or ends with a space (mosquitto's ACL file trims it)" }
        else if value.utf8.count > 256 { problem = "is longer than 256 bytes" }
        else { problem = nil }
        if let problem { throw AccountsError.refused("OwnTracks device '\(printable(text))': the \(part) \(problem)") }
    }

    /// A name as an error message can show it, on one line.
    static func printable(_ text: String) -> String {
        text.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? "\\u{\(String($0.value, radix: 16))}" : String($0) }.joined()
    }
}

/// An OwnTracks app's device: it publishes on `owntracks/{user}/{device}`.
struct OwnTracksDevice: Hashable, Comparable, Codable, CustomStringConvertible, Sendable {
    let user: String
    let device: String

    init(parsing text: String) throws {
        guard let slash = text.firstIndex(of: "/") else {
            throw AccountsError.refused("OwnTracks device '\(AccountRules.printable(text))' is not USER/DEVICE")
        }
        user = String(text[..<slash])
        device = String(text[text.index(after: slash)...])
        try AccountRules.checkOwnTracksPart(user, part: "user", of: text)
        try AccountRules.checkOwnTracksPart(device, part: "device", of: text)
        guard user != AccountRules.trackerUser else {
            throw AccountsError.refused("OwnTracks user '\(user)' is reserved: Tracker publishes the friends' positions under it")
        }
        guard !AccountRules.reservedLogins.contains(user) else {
            throw AccountsError.refused("OwnTracks user '\(user)' is reserved: it is one of the deployment's own accounts (config/acl)")
        }
    }

    /// The Tracker device id the gateway gives it (docs/contract.md, "OwnTracks device ids").
    var id: DeviceID { .ownTracks(user: user, device: device) }
    var topic: String { "owntracks/\(user)/\(device)" }
    var description: String { "\(user)/\(device)" }
    static func < (a: OwnTracksDevice, b: OwnTracksDevice) -> Bool { (a.user, a.device) < (b.user, b.device) }

    private enum CodingKeys: String, CodingKey { case user, device }
    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let text = "\(try container.decode(String.self, forKey: .user))/\(try container.decode(String.self, forKey: .device))"
        do { try self.init(parsing: text) } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "\(error)"))
        }
    }
}

/// A team member: an OwnTracks device (`USER/DEVICE`) or a plain Tracker device id.
/// Kept in the registry as it is written on the command line.
enum TeamMember: Hashable, Codable, CustomStringConvertible, Sendable {
    case ownTracks(OwnTracksDevice)
    case device(DeviceID)

    init(parsing text: String) throws {
        if text.contains("/") {
            self = .ownTracks(try OwnTracksDevice(parsing: text))
        } else if let id = DeviceID(text) {
            guard !AccountRules.reservedLogins.contains(text) else {
                throw AccountsError.refused("team member '\(text)' is reserved: it is one of the deployment's own accounts (config/acl)")
            }
            self = .device(id)
        } else {
            throw AccountsError.refused("team member '\(AccountRules.printable(text))' is neither USER/DEVICE (an OwnTracks device) nor a device id (1–64 characters of A-Z a-z 0-9 . _ -, not starting with _)")
        }
    }

    var id: DeviceID {
        switch self {
        case .ownTracks(let device): device.id
        case .device(let id): id
        }
    }

    var description: String {
        switch self {
        case .ownTracks(let device): device.description
        case .device(let id): id.rawValue
        }
    }

    init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        do { try self.init(parsing: text) } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "\(error)"))
        }
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

struct Account: Codable, Hashable, Sendable {
    var kind: AccountKind
    var login: String
    /// A device's own OwnTracks device, when its login is not the app's user name.
    var owntracks: OwnTracksDevice?
    /// A token's device (its login is `ingest.{device}`). Absent for every other kind,
    /// and in registries written before tokens.
    var device: DeviceID?
}

struct Team: Codable, Hashable, Sendable {
    var name: String
    var members: [TeamMember]
}

/// `accounts.json`: what the tool added. Never a password: those live only
/// as mosquitto_passwd's hashes.
struct Registry: Codable, Sendable {
    var version = 1
    var accounts: [Account] = []
    var teams: [Team] = []

    /// A hand-edited file must not smuggle a line into the ACL.
    func validate() throws {
        for account in accounts {
            if account.kind == .token {
                // Its login and its one ACL line come from the device id alone.
                guard let device = account.device else {
                    throw AccountsError.refused("token '\(AccountRules.printable(account.login))' has no device")
                }
                _ = try AccountRules.tokenDevice(device.rawValue)
                guard account.login == AccountRules.tokenLogin(for: device) else {
                    throw AccountsError.refused("token '\(AccountRules.printable(account.login))' is not the login \(AccountRules.tokenLogin(for: device)) of its device \(device)")
                }
            } else {
                // Not checkAccountLogin: a login `ingest.…` added before tokens existed stays loadable.
                try AccountRules.checkLogin(account.login)
                if account.device != nil {
                    throw AccountsError.refused("\(account.kind.rawValue) '\(account.login)' has a token's device; only tokens have one")
                }
            }
            if account.owntracks != nil, account.kind != .device {
                throw AccountsError.refused("\(account.kind.rawValue) '\(account.login)' has an OwnTracks device; only devices have one")
            }
        }
        for team in teams { try AccountRules.checkTeamName(team.name) }
    }

    func account(_ login: String) -> Account? { accounts.first { $0.login == login } }
    func account(owning device: OwnTracksDevice) -> Account? { accounts.first { $0.owntracks == device } }
    func token(for device: DeviceID) -> Account? { accounts.first { $0.kind == .token && $0.device == device } }
    func team(_ name: String) -> Team? { teams.first { $0.name == name } }

    /// Adds or replaces a team, keeping the teams in name order.
    mutating func put(_ team: Team) {
        teams.removeAll { $0.name == team.name }
        teams.append(team)
        teams.sort { $0.name < $1.name }
    }

    /// The login a member reads its friends with: its own per-device login,
    /// else the app's user name (an OwnTracks device) or the id (a Tracker device).
    func readingLogin(of member: TeamMember) -> String {
        switch member {
        case .ownTracks(let device): account(owning: device)?.login ?? device.user
        case .device(let id): id.rawValue
        }
    }

    /// The teams in which `login` reads for some member.
    func teams(readBy login: String) -> [String] {
        teams.filter { team in team.members.contains { readingLogin(of: $0) == login } }.map(\.name).sorted()
    }
}

/// The ACL lines the registry stands for, after a marker line in the
/// deployment's ACL file. Everything above the marker is the deployment's
/// own (config/acl) and stays as it is.
enum GeneratedACL {
    static let marker = "# ---- Below: written by 'trackerctl accounts'; change it with that tool, not by hand. ----"

    /// The same as `user tracker-map` in config/acl (AccountsTests holds them equal).
    static let mapLines = [
        "topic read tracker/+/live", "topic read tracker/+/events", "topic read tracker/_health/#", "topic write tracker/+/cmd/getLive",
        "topic write tracker/+/cmd/buildTrack", "topic write tracker/+/cmd/getSessions",
        "topic write tracker/+/cmd/getGeofences", "topic write tracker/+/cmd/getGeofenceEvents",
    ]
    /// The same as `user trackerctl` in config/acl.
    static let operatorLines = ["topic readwrite tracker/#", "topic readwrite owntracks/#", "topic read $SYS/#"]

    /// An ingest token's one grant: its device's fixes, as tracker-http publishes them for Traccar Client.
    static func tokenLine(_ device: DeviceID) -> String { "topic write tracker/\(device)/fixes" }

    /// The `%u` patterns of the deployment's ACL (the part above the marker),
    /// as mosquitto reads them. They apply to every login, a token's too
    /// (`pattern write tracker/%u/fixes` would let `ingest.van7` publish as
    /// the device `ingest.van7`), so a token's block denies each of them for
    /// its login: mosquitto checks a user's `deny` lines before anything else.
    static func userPatterns(in head: String) -> [String] {
        var topics: [String] = []
        for raw in head.components(separatedBy: "\n") {
            var line = Substring(raw)
            while let last = line.last, last.isWhitespace { line = line.dropLast() }
            guard !line.hasPrefix("#") else { continue }
            // strtok on " ": the keyword, the access, then the rest (trimmed) is the topic;
            // with nothing after the access, that word is the topic.
            let words = line.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: true)
            guard words.first == "pattern", words.count >= 2 else { continue }
            let topic = (words.count == 3 ? words[2] : words[1]).trimmingCharacters(in: CharacterSet(charactersIn: " \t"))
            // %c (the client id) is no login's to deny: on tracker-http's gate it is not the login.
            if topic.contains("%u"), !topic.contains("%c"), !topics.contains(topic) { topics.append(topic) }
        }
        return topics
    }

    /// A token's block: its one grant, then a `deny` for each of the head's `%u` patterns.
    static func tokenLines(_ device: DeviceID, login: String, patterns: [String]) -> [String] {
        [tokenLine(device)] + patterns.map { "topic deny " + $0.replacingOccurrences(of: "%u", with: login) }
    }

    /// A per-device login's own lines: its OwnTracks device (sub-topics
    /// included, as the patterns give a user's) and the Tracker device's
    /// events, replies, live frame and commands. `topic` takes the rest of the
    /// line, so names with spaces need no quoting.
    static func deviceLines(_ device: OwnTracksDevice) -> [String] {
        let id = device.id
        return ["topic write \(device.topic)", "topic write \(device.topic)/#", "topic read \(device.topic)/cmd",
                "topic read tracker/\(id)/events", "topic read tracker/\(id)/reply/#", "topic read tracker/\(id)/live",
                "topic write tracker/\(id)/cmd/+"]
    }

    /// Where the track service publishes a device's position and card for its friends.
    static func friendLines(_ id: DeviceID) -> [String] {
        ["topic read owntracks/\(AccountRules.trackerUser)/\(id)", "topic read owntracks/\(AccountRules.trackerUser)/\(id)/info"]
    }

    /// One `user` block per login that needs lines, in login order. `patterns`:
    /// the deployment's `%u` patterns (`userPatterns(in:)`), denied to tokens.
    static func body(for registry: Registry, patterns: [String] = []) -> String {
        var blocks: [String: Block] = [:]
        var tokenLogins: Set<String> = []
        for account in registry.accounts {
            var block = Block(login: account.login, about: "\(account.kind.rawValue) \(account.login)")
            switch (account.kind, account.owntracks) {
            case (.device, let device?):
                block.about += ": OwnTracks \(device), Tracker id \(device.id)"
                block.add(deviceLines(device))
            case (.device, nil): break  // the patterns in config/acl cover a login that is the device id or the app's user
            case (.map, _): block.add(mapLines)
            case (.operator, _): block.add(operatorLines)
            case (.token, _):
                guard let device = account.device else { continue }  // validate() refuses it
                block.about += ": device \(device)'s fixes only (tracker-http, Traccar Client); config/acl's patterns denied"
                block.add(tokenLines(device, login: account.login, patterns: patterns))
                tokenLogins.insert(account.login)
            }
            blocks[account.login] = block
        }
        // Each member reads every other member of each of its teams, nothing more.
        for team in registry.teams.sorted(by: { $0.name < $1.name }) {
            for member in team.members {
                let login = registry.readingLogin(of: member)
                // A token reads nothing, whatever a team says (`add team` refuses such a member).
                guard !tokenLogins.contains(login) else { continue }
                var block = blocks[login] ?? Block(login: login, about: "\(login): a login not added by this tool")
                if !block.teams.contains(team.name) { block.teams.append(team.name) }
                for other in team.members where other.id != member.id { block.add(friendLines(other.id)) }
                blocks[login] = block
            }
        }
        return blocks.values.filter { !$0.lines.isEmpty }.sorted { $0.login < $1.login }.map(\.text).joined()
    }

    /// The file with everything up to and including the marker kept (the
    /// marker appended if absent) and the rest made from the registry.
    static func merged(_ existing: String, registry: Registry) -> String {
        let lines = existing.components(separatedBy: "\n")
        let head: String
        if let index = lines.firstIndex(where: { $0 == marker || $0 == marker + "\r" }) {
            head = lines[...index].map { $0 + "\n" }.joined()
        } else {
            head = (existing.isEmpty || existing.hasSuffix("\n") ? existing : existing + "\n") + marker + "\n"
        }
        return head + body(for: registry, patterns: userPatterns(in: head))
    }

    private struct Block {
        let login: String
        var about: String
        var teams: [String] = []
        var lines: [String] = []

        mutating func add(_ new: [String]) { for line in new where !lines.contains(line) { lines.append(line) } }

        var text: String {
            let comment = "# " + about + (teams.isEmpty ? "" : "; teams: " + teams.joined(separator: ", "))
            return ([comment, "user \(login)"] + lines).map { $0 + "\n" }.joined()
        }
    }
}
