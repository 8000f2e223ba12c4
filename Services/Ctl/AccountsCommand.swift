import Foundation
import Model
#if canImport(Glibc)
import Glibc
#endif

/// `trackerctl accounts`: keeps the broker's password files and the
/// generated part of its ACL, from a registry of what it added. Files only:
/// it never connects to the broker.
enum AccountsCommand {
    static let usage = """
        usage: trackerctl accounts [--dir DIR] <action>
          add device LOGIN [--password P] [--owntracks USER/DEVICE]
          add map LOGIN [--password P]
          add operator LOGIN [--password P]
          add token DEVICE                 an ingest token for tracker-http (Traccar Client): prints DEVICE~SECRET once;
                                           its login ingest.DEVICE may only publish tracker/DEVICE/fixes
          add team TEAM MEMBER...          a member: USER/DEVICE (an OwnTracks device) or a Tracker device id
          remove device|map|operator LOGIN
          remove token DEVICE
          remove team TEAM [MEMBER...]     without members: the whole team
          list [--json]
        DIR: TRACKER_ACCOUNTS_DIR, else /etc/tracker; it holds passwords, operators, acl (copied from
        config/acl first) and accounts.json. Without --password a random one is made and printed once
        (a token's secret is always made). Logins starting with ingest. are tokens' only.
        """

    static let reloadHint = "mosquitto rereads the password files and the ACL on SIGHUP: kill -HUP $(pidof mosquitto) (compose: docker compose kill -s HUP broker)"

    static func main(_ arguments: [String]) -> Never {
        do {
            try run(arguments)
            exit(0)
        } catch let error as AccountsError {
            Ctl.fail("trackerctl accounts: \(error.description)", code: error.code)
        } catch let error as UsageError {
            Ctl.fail("trackerctl accounts: \(error.message) (trackerctl accounts help)", code: 2)
        } catch {
            Ctl.fail("trackerctl accounts: \(error)", code: 1)
        }
    }

    static func run(_ arguments: [String]) throws {
        var args = Arguments(arguments)
        let directory = args.value("--dir") ?? ProcessInfo.processInfo.environment["TRACKER_ACCOUNTS_DIR"] ?? "/etc/tracker"
        let action = try AccountsAction.parse(&args)
        let files = AccountFiles(directory: directory)
        switch action {
        case .help:
            print(usage)
        case .list(let json):
            print(try AccountsListing.text(try files.loadRegistry(), json: json), terminator: "")
        default:
            try files.locked { try change(action, files) }
        }
    }

    /// Checks everything first, then writes: a refusal leaves every file as it was.
    static func change(_ action: AccountsAction, _ files: AccountFiles) throws {
        let aclText = try files.readACL()
        var registry = try files.loadRegistry()
        var outcome: Outcome
        switch action {
        case .addLogin(let kind, let login, let password, let device):
            outcome = try addLogin(kind, login, password: password, device: device, to: &registry, files)
        case .removeLogin(let kind, let login):
            outcome = try removeLogin(kind, login, from: &registry, files)
        case .addToken(let device):
            outcome = try addToken(device, to: &registry, files)
        case .removeToken(let device):
            outcome = try removeToken(device, from: &registry, files)
        case .addMembers(let name, let members):
            outcome = try addMembers(members, to: name, in: &registry)
        case .removeTeam(let name, let members):
            outcome = try removeMembers(members, from: name, in: &registry)
        case .list, .help:
            return
        }
        try files.write(registry: registry, acl: GeneratedACL.merged(aclText, registry: registry), passwordChange: outcome.passwordChange)
        if let token = outcome.token { print(token) }
        else if let password = outcome.generatedPassword { print("\(outcome.login ?? "") \(password)") }
        // Status on stderr: stdout carries only the generated password or token, for scripts.
        FileHandle.standardError.write(Data("\(outcome.done) in \(files.directory)\n\(reloadHint)\n".utf8))
    }

    /// What a change did, and what it asks of mosquitto_passwd.
    struct Outcome {
        var done: String
        var login: String?
        var passwordChange: PasswordChange?
        var generatedPassword: String?
        /// `DEVICE~SECRET`, printed instead of `LOGIN PASSWORD`.
        var token: String?
    }

    static func addLogin(_ kind: AccountKind, _ login: String, password: String?, device: OwnTracksDevice?,
                         to registry: inout Registry, _ files: AccountFiles) throws -> Outcome {
        try AccountRules.checkAccountLogin(login)
        if let existing = registry.account(login) {
            throw AccountsError.refused("login '\(login)' already exists (a \(existing.kind.rawValue)); remove it first")
        }
        // One made by hand (a service's, say) is no less taken.
        for file in ["passwords", "operators"] where try files.logins(in: file).contains(login) {
            throw AccountsError.refused("login '\(login)' already exists in \(files.path(file)) (not added by this tool); remove it first (mosquitto_passwd -D)")
        }
        if let device, let owner = registry.account(owning: device) {
            throw AccountsError.refused("OwnTracks device '\(device)' already has the login '\(owner.login)'; remove it first")
        }
        let secret = password ?? PasswordTool.generate()
        registry.accounts.append(Account(kind: kind, login: login, owntracks: device))
        return Outcome(done: "added \(kind.rawValue) \(login)" + (device.map { " (OwnTracks \($0), Tracker id \($0.id))" } ?? ""),
                       login: login, passwordChange: PasswordChange(file: kind.passwordFile, arguments: ["-b", login, secret]),
                       generatedPassword: password == nil ? secret : nil)
    }

    static func removeLogin(_ kind: AccountKind, _ login: String, from registry: inout Registry, _ files: AccountFiles) throws -> Outcome {
        try AccountRules.checkLogin(login)
        guard let existing = registry.account(login) else {
            throw AccountsError.refused("no \(kind.rawValue) '\(login)' in \(files.path(AccountFiles.registryName)); nothing removed")
        }
        guard existing.kind == kind else {
            let hint = existing.device.map { " (remove token \($0))" } ?? ""
            throw AccountsError.refused("'\(login)' is a \(existing.kind.rawValue), not a \(kind.rawValue)\(hint); nothing removed")
        }
        registry.accounts.removeAll { $0.login == login }
        // A hash removed by hand already is no reason to keep the rest.
        let inFile = try files.logins(in: kind.passwordFile).contains(login)
        return Outcome(done: "removed \(kind.rawValue) \(login)", login: login,
                       passwordChange: inFile ? PasswordChange(file: kind.passwordFile, arguments: ["-D", login]) : nil)
    }

    /// A device's ingest token: the login `ingest.DEVICE` with a generated
    /// secret (never one given: a token must be random), and `DEVICE~SECRET`
    /// to print, which Traccar Client sends as its device identifier.
    static func addToken(_ device: DeviceID, to registry: inout Registry, _ files: AccountFiles) throws -> Outcome {
        let login = AccountRules.tokenLogin(for: device)
        if registry.token(for: device) != nil {
            throw AccountsError.refused("device '\(device)' already has a token; remove it first (remove token \(device))")
        }
        if let existing = registry.account(login) {
            throw AccountsError.refused("login '\(login)' already exists (a \(existing.kind.rawValue)); remove it first")
        }
        for file in ["passwords", "operators"] where try files.logins(in: file).contains(login) {
            throw AccountsError.refused("login '\(login)' already exists in \(files.path(file)) (not added by this tool); remove it first (mosquitto_passwd -D)")
        }
        let secret = PasswordTool.generate()
        // What tracker-http's IngestToken.parse takes; the generator always meets it.
        guard secret.count >= AccountRules.minimumTokenSecretLength, secret.utf8.allSatisfy(PasswordTool.isURLSafe) else {
            throw AccountsError.failed("the generated secret is not ≥ \(AccountRules.minimumTokenSecretLength) URL-safe characters")
        }
        registry.accounts.append(Account(kind: .token, login: login, device: device))
        return Outcome(done: "added token \(login) (device \(device); it may only publish tracker/\(device)/fixes)", login: login,
                       passwordChange: PasswordChange(file: AccountKind.token.passwordFile, arguments: ["-b", login, secret]),
                       token: "\(device)\(AccountRules.tokenSeparator)\(secret)")
    }

    static func removeToken(_ device: DeviceID, from registry: inout Registry, _ files: AccountFiles) throws -> Outcome {
        guard let existing = registry.token(for: device) else {
            throw AccountsError.refused("device '\(device)' has no token in \(files.path(AccountFiles.registryName)); nothing removed")
        }
        registry.accounts.removeAll { $0.kind == .token && $0.device == device }
        let inFile = try files.logins(in: AccountKind.token.passwordFile).contains(existing.login)
        return Outcome(done: "removed token \(existing.login) (device \(device))", login: existing.login,
                       passwordChange: inFile ? PasswordChange(file: AccountKind.token.passwordFile, arguments: ["-D", existing.login]) : nil)
    }

    static func addMembers(_ members: [TeamMember], to name: String, in registry: inout Registry) throws -> Outcome {
        try AccountRules.checkTeamName(name)
        var team = registry.team(name) ?? Team(name: name, members: [])
        for member in members {
            // Its friends' lines would go to the login it reads with: never a token's.
            let login = registry.readingLogin(of: member)
            if login.hasPrefix(AccountRules.tokenLoginPrefix) {
                throw AccountsError.refused("team member '\(member)' would read as '\(login)': logins starting with '\(AccountRules.tokenLoginPrefix)' are ingest tokens', which read nothing")
            }
            // One device, one member: `jane/phone` and `jane.phone` are the same id.
            if let same = team.members.first(where: { $0.id == member.id }) {
                throw AccountsError.refused("team '\(name)' already has '\(same)' (Tracker id \(member.id))")
            }
            team.members.append(member)
        }
        registry.put(team)
        return Outcome(done: "team \(name): \(team.members.map(\.description).joined(separator: ", "))")
    }

    static func removeMembers(_ members: [TeamMember], from name: String, in registry: inout Registry) throws -> Outcome {
        try AccountRules.checkTeamName(name)
        guard var team = registry.team(name) else { throw AccountsError.refused("no team '\(name)'; nothing removed") }
        for member in members {
            guard team.members.contains(where: { $0.id == member.id }) else {
                throw AccountsError.refused("team '\(name)' has no member '\(member)'; nothing removed")
            }
            team.members.removeAll { $0.id == member.id }
        }
        // An empty team means nothing: it goes too.
        guard !members.isEmpty, !team.members.isEmpty else {
            registry.teams.removeAll { $0.name == name }
            return Outcome(done: "removed team \(name)")
        }
        registry.put(team)
        return Outcome(done: "team \(name): \(team.members.map(\.description).joined(separator: ", "))")
    }
}

/// What the command line asks for.
enum AccountsAction {
    case addLogin(AccountKind, login: String, password: String?, owntracks: OwnTracksDevice?)
    case removeLogin(AccountKind, login: String)
    case addToken(DeviceID)
    case removeToken(DeviceID)
    case addMembers(team: String, [TeamMember])
    case removeTeam(team: String, [TeamMember])
    case list(json: Bool)
    case help

    static func parse(_ args: inout Arguments) throws -> AccountsAction {
        // Options first, so their values are never taken for positionals.
        let password = args.value("--password")
        let owntracks = args.value("--owntracks")
        let json = args.flag("--json")
        guard let verb = args.positional() else { throw UsageError("needs an action: add, remove or list") }
        func rest() -> [String] { var all: [String] = []; while let next = args.positional() { all.append(next) }; return all }
        func refuse(_ option: String, _ value: String?, _ rule: String) throws {
            if value != nil { throw UsageError("\(option) \(rule)") }
        }
        let passwordRule = "goes with add device|map|operator only", owntracksRule = "goes with add device only"
        let tokenPasswordRule = "does not go with tokens: a token's secret is always generated (a token must be random)"
        switch verb {
        case "help", "--help", "-h":
            return .help
        case "list":
            try refuse("--password", password, passwordRule); try refuse("--owntracks", owntracks, owntracksRule)
            try args.finish()
            return .list(json: json)
        case "add", "remove":
            if json { throw UsageError("--json goes with list") }
            guard let kindText = args.positional() else { throw UsageError("\(verb) needs a kind: device, map, operator, token or team") }
            if kindText == "team" {
                try refuse("--password", password, passwordRule); try refuse("--owntracks", owntracks, owntracksRule)
                guard let team = args.positional() else { throw UsageError("\(verb) team needs TEAM") }
                let members = try rest().map { try TeamMember(parsing: $0) }
                try args.finish()
                if verb == "add" {
                    guard !members.isEmpty else { throw UsageError("add team needs TEAM and at least one MEMBER") }
                    return .addMembers(team: team, members)
                }
                return .removeTeam(team: team, members)
            }
            guard let kind = AccountKind(rawValue: kindText) else {
                throw AccountsError.refused("unknown kind '\(AccountRules.printable(kindText))': expected device, map, operator, token or team")
            }
            if kind == .token {
                try refuse("--password", password, tokenPasswordRule); try refuse("--owntracks", owntracks, owntracksRule)
                guard let device = args.positional() else { throw UsageError("\(verb) token needs DEVICE") }
                try args.finish()
                let id = try AccountRules.tokenDevice(device)
                return verb == "add" ? .addToken(id) : .removeToken(id)
            }
            guard let login = args.positional() else { throw UsageError("\(verb) \(kind.rawValue) needs LOGIN") }
            try args.finish()
            if verb == "remove" {
                try refuse("--password", password, passwordRule); try refuse("--owntracks", owntracks, owntracksRule)
                return .removeLogin(kind, login: login)
            }
            if kind != .device { try refuse("--owntracks", owntracks, owntracksRule) }
            if let password {
                guard !password.isEmpty, !password.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
                    throw AccountsError.refused("--password: empty or with a control character (a newline …)")
                }
            }
            return .addLogin(kind, login: login, password: password, owntracks: try owntracks.map { try OwnTracksDevice(parsing: $0) })
        default:
            throw UsageError("unknown action '\(AccountRules.printable(verb))': expected add, remove or list")
        }
    }
}

/// One run of mosquitto_passwd on a password file.
struct PasswordChange {
    let file: String
    let arguments: [String]
}

/// Debian's mosquitto_passwd: the only thing that ever writes a hash.
enum PasswordTool {
    static func executable() throws -> String {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let candidates = path.split(separator: ":").map { "\($0)/mosquitto_passwd" } + ["/usr/bin/mosquitto_passwd"]
        guard let found = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw AccountsError.failed("mosquitto_passwd not found on PATH or in /usr/bin (Debian: apt-get install mosquitto)")
        }
        return found
    }

    /// `mosquitto_passwd ARGS…` on `file`. `-b` takes the password as an
    /// argument (the tool reads no other way without a terminal), so it is in
    /// the process list for the moment the tool runs.
    static func run(_ change: PasswordChange, on file: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try executable())
        var arguments = change.arguments
        arguments.insert(file, at: 1)
        process.arguments = arguments
        let output = Pipe()
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            let said = text.split(whereSeparator: \.isNewline).joined(separator: "; ")
            throw AccountsError.failed("mosquitto_passwd \(change.arguments[0]) failed (status \(process.terminationStatus)): \(said)")
        }
    }

    /// A character of URL-safe base64 without padding: A-Z a-z 0-9 - _.
    static func isURLSafe(_ b: UInt8) -> Bool {
        (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == UInt8(ascii: "-") || b == UInt8(ascii: "_")
    }

    /// 24 random bytes (192 bits) as URL-safe base64, 32 characters (no padding: 24 is a multiple of 3).
    static func generate() -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<24).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }
}

/// The accounts directory: `passwords`, `operators`, `acl`, `accounts.json`.
struct AccountFiles {
    static let registryName = "accounts.json"
    let directory: String

    func path(_ name: String) -> String { (directory as NSString).appendingPathComponent(name) }

    func readACL() throws -> String {
        let acl = path("acl")
        guard FileManager.default.fileExists(atPath: acl) else {
            throw AccountsError.refused("\(acl) does not exist: copy the repository's config/acl there first (cp config/acl \(acl))")
        }
        do { return try String(contentsOfFile: acl, encoding: .utf8) } catch {
            throw AccountsError.failed("cannot read \(acl): \(error.localizedDescription)")
        }
    }

    func loadRegistry() throws -> Registry {
        let file = path(Self.registryName)
        guard let data = FileManager.default.contents(atPath: file) else {
            if FileManager.default.fileExists(atPath: file) { throw AccountsError.failed("cannot read \(file)") }
            return Registry()
        }
        let registry: Registry
        do { registry = try JSONCoding.decoder.decode(Registry.self, from: data) } catch {
            throw AccountsError.failed("\(file) is not a registry this tool wrote: \(DecodingErrorText.describe(any: error))")
        }
        do { try registry.validate() } catch let error as AccountsError {
            throw AccountsError.failed("\(file): \(error.description)")
        }
        return registry
    }

    /// The logins in a mosquitto password file (`login:hash` lines).
    func logins(in name: String) throws -> Set<String> {
        guard let text = try? String(contentsOfFile: path(name), encoding: .utf8) else { return [] }
        return Set(text.split(whereSeparator: \.isNewline).compactMap { line in line.split(separator: ":", maxSplits: 1).first.map(String.init) })
    }

    /// Runs `body` holding an exclusive lock on the directory, so two runs never lose each other's change.
    func locked(_ body: () throws -> Void) throws {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw AccountsError.refused("\(directory) is not a directory (--dir, or TRACKER_ACCOUNTS_DIR)")
        }
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw AccountsError.failed("cannot open \(directory): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        guard flock(fd, LOCK_EX) == 0 else { throw AccountsError.failed("cannot lock \(directory): \(String(cString: strerror(errno)))") }
        try body()
    }

    /// Every file staged beside its target first (the password file changed
    /// on a copy by mosquitto_passwd), then each renamed into place: the
    /// broker never reads a half-written file, and a failure leaves the old ones.
    func write(registry: Registry, acl: String, passwordChange: PasswordChange?) throws {
        var staged: [(temp: String, target: String)] = []
        defer { for file in staged { unlink(file.temp) } }
        for name in ["passwords", "operators"] {
            let target = path(name)
            let exists = FileManager.default.fileExists(atPath: target)
            guard !exists || passwordChange?.file == name else { continue }
            let current = exists ? try contents(of: target) : Data()
            let temp = try AtomicFile.stage(current, for: target)
            staged.append((temp, target))
            if let passwordChange, passwordChange.file == name { try PasswordTool.run(passwordChange, on: temp) }
        }
        staged.append((try AtomicFile.stage(Data(acl.utf8), for: path("acl")), path("acl")))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        staged.append((try AtomicFile.stage(try encoder.encode(registry) + Data("\n".utf8), for: path(Self.registryName)), path(Self.registryName)))
        for file in staged {
            guard rename(file.temp, file.target) == 0 else {
                throw AccountsError.failed("cannot replace \(file.target): \(String(cString: strerror(errno)))")
            }
        }
        staged = []
    }

    private func contents(of file: String) throws -> Data {
        guard let data = FileManager.default.contents(atPath: file) else { throw AccountsError.failed("cannot read \(file)") }
        return data
    }
}

/// Temp-and-rename writes that keep the target's mode and owner (a broker
/// that runs as its own user must still read the files after a SIGHUP).
enum AtomicFile {
    /// Writes `data` to a new file beside `target`, mode and owner as the
    /// target's (0600 for a new one); returns its path.
    static func stage(_ data: Data, for target: String) throws -> String {
        var info = stat()
        let exists = stat(target, &info) == 0
        let mode = exists ? info.st_mode & 0o7777 : 0o600
        let directory = (target as NSString).deletingLastPathComponent
        let temp = (directory as NSString).appendingPathComponent(".\((target as NSString).lastPathComponent).\(UUID().uuidString.prefix(8)).tmp")
        let fd = open(temp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw AccountsError.failed("cannot create \(temp): \(String(cString: strerror(errno)))") }
        var ok = true
        if exists, info.st_uid != geteuid() || info.st_gid != getegid() { _ = fchown(fd, info.st_uid, info.st_gid) }  // best effort: root can
        ok = ok && fchmod(fd, mode) == 0
        ok = ok && data.withUnsafeBytes { buffer in
            guard let base = buffer.baseAddress else { return true }  // nothing to write
            var offset = 0
            while offset < buffer.count {
                let written = Glibc.write(fd, base + offset, buffer.count - offset)
                if written <= 0 { return false }
                offset += written
            }
            return true
        }
        ok = ok && fsync(fd) == 0
        let failure = String(cString: strerror(errno))
        close(fd)
        guard ok else {
            unlink(temp)
            throw AccountsError.failed("cannot write \(temp): \(failure)")
        }
        return temp
    }
}

/// What `list` prints.
enum AccountsListing {
    static func text(_ registry: Registry, json: Bool) throws -> String {
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            return String(decoding: try encoder.encode(registry), as: UTF8.self) + "\n"
        }
        if registry.accounts.isEmpty && registry.teams.isEmpty { return "no accounts\n" }
        var out = ""
        let width = registry.accounts.map(\.login.count).max() ?? 0
        for account in registry.accounts.sorted(by: { ($0.kind.rawValue, $0.login) < ($1.kind.rawValue, $1.login) }) {
            var line = account.kind.rawValue.padding(toLength: 9, withPad: " ", startingAt: 0)
                + account.login.padding(toLength: width, withPad: " ", startingAt: 0)
            if let device = account.owntracks { line += "  owntracks \(device) (id \(device.id))" }
            if let device = account.device { line += "  device \(device)" }
            let teams = registry.teams(readBy: account.login)
            if !teams.isEmpty { line += "  teams " + teams.joined(separator: ",") }
            out += line.trimmingCharacters(in: .whitespaces) + "\n"
        }
        for team in registry.teams {
            let members = team.members.map { member in
                let login = registry.readingLogin(of: member)
                // A reader managed elsewhere (or not yet added) still gets its lines.
                let mark = registry.account(login) == nil ? ", login \(login) not added here" : ", login \(login)"
                return "\(member) (id \(member.id)\(mark))"
            }
            out += "team \(team.name): " + members.joined(separator: "; ") + "\n"
        }
        return out
    }
}
