import Bus
import Foundation
import Model
import Synchronization
import TestSupport
import Testing

/// `trackerctl accounts` as an operator runs it: the built binary on a
/// directory holding a copy of the repository's config/acl, then the real
/// broker (the product's config/mosquitto-logins.conf) on the files it wrote.
/// Every refusal is checked beside something allowed that arrives after it,
/// so "nothing arrived" is never the whole evidence.
@Suite(.serialized) struct AccountsTests {
    static let marker = "# ---- Below: written by 'trackerctl accounts'; change it with that tool, not by hand. ----"

    // MARK: Files

    @Test func addPrintsAGeneratedPasswordOnceAndKeepsTheFilesPrivate() throws {
        let dir = try AccountsDirectory()
        let original = try String(contentsOf: Repository.root.appendingPathComponent("config/acl"), encoding: .utf8)
        let added = try dir.run(["add", "device", "van7"])
        #expect(added.code == 0, "\(added.stderr)")
        let words = added.stdout.split(separator: " ")
        #expect(added.stdout.hasSuffix("\n") && added.stdout.filter { $0 == "\n" }.count == 1 && words.count == 2 && words[0] == "van7", "\(added.stdout)")
        let password = String(words.last ?? "").trimmingCharacters(in: .newlines)
        // At least 128 bits in URL-safe characters.
        #expect(password.count >= 22 && password.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }, "\(password)")
        #expect(added.stderr.contains("SIGHUP") && added.stderr.contains("kill -HUP"), "\(added.stderr)")
        // A given password is not printed; a second generated one differs.
        let given = try dir.run(["add", "map", "wall", "--password", "its own secret"])
        #expect(given.code == 0 && given.stdout.isEmpty, "\(given.stdout)\(given.stderr)")
        let other = try dir.run(["add", "operator", "ops"])
        #expect(other.code == 0 && !other.stdout.contains(password), "\(other.stdout)")
        // Hashes only, made by mosquitto_passwd; the registry holds no password at all.
        let passwords = try dir.text("passwords"), registry = try dir.text("accounts.json")
        #expect(passwords.contains("van7:$7$") && passwords.contains("wall:$7$") && !passwords.contains(password) && !passwords.contains("its own secret"))
        #expect(try dir.text("operators").hasPrefix("ops:$7$"))
        #expect(!passwords.contains("ops:"))
        #expect(registry.contains(#""login" : "van7""#) && !registry.contains(password) && !registry.contains("its own secret"))
        for name in ["passwords", "operators", "accounts.json"] { #expect(try dir.mode(name) == 0o600, "\(name)") }
        // The ACL kept to the marker byte for byte, its mode as it was; the map's lines after it.
        let acl = try dir.text("acl")
        #expect(try dir.mode("acl") == 0o644)
        let markerEnd = try #require(original.range(of: Self.marker + "\n")).upperBound
        #expect(acl.hasPrefix(String(original[..<markerEnd])))
        #expect(acl.contains("user wall\ntopic read tracker/+/live\n"))
        // No temp file left behind.
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.url.path).sorted() == ["accounts.json", "acl", "operators", "passwords"])
        // TRACKER_ACCOUNTS_DIR is the default directory.
        let listed = try dir.run(["list"], viaEnvironment: true)
        #expect(listed.code == 0 && listed.stdout.contains("device") && listed.stdout.contains("van7") && listed.stdout.contains("wall"), "\(listed.stdout)")
        let json = try dir.run(["list", "--json"])
        let decoded = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
        #expect((decoded?["accounts"] as? [[String: Any]])?.compactMap { $0["login"] as? String } == ["van7", "wall", "ops"])
    }

    /// An ACL without the marker gets it at its end; what was there stays.
    @Test func anACLWithoutTheMarkerGetsItAppended() throws {
        let original = try String(contentsOf: Repository.root.appendingPathComponent("config/acl"), encoding: .utf8)
        let withoutMarker = original.replacingOccurrences(of: Self.marker + "\n", with: "")
        #expect(!withoutMarker.contains(Self.marker))
        let dir = try AccountsDirectory(acl: withoutMarker + "# no newline at the end")
        let run = try dir.run(["add", "device", "van7", "--password", "p", "--owntracks", "van/seven"])
        #expect(run.code == 0, "\(run.stderr)")
        let acl = try dir.text("acl")
        #expect(acl.hasPrefix(withoutMarker + "# no newline at the end\n" + Self.marker + "\n# device van7"), "\(acl.suffix(400))")
        // Once only, however often it changes.
        #expect(try dir.run(["remove", "device", "van7"]).code == 0)
        #expect(try dir.text("acl") == withoutMarker + "# no newline at the end\n" + Self.marker + "\n")
    }

    /// The map's generated lines are config/acl's `user tracker-map` lines.
    @Test func aMapLoginGetsTheLinesOfTheMapAccount() throws {
        let dir = try AccountsDirectory()
        #expect(try dir.run(["add", "map", "wall", "--password", "p"]).code == 0)
        let acl = try dir.text("acl")
        #expect(Self.block("wall", in: acl) == Self.block("tracker-map", in: acl))
        #expect(Self.block("wall", in: acl).count == 8)
    }

    /// A member reads with its own per-device login when it has one, else the
    /// app's user; `list` says which readers the tool did not add.
    @Test func listShowsLoginsTeamsAndReadersNotAddedHere() throws {
        let dir = try AccountsDirectory()
        _ = try dir.add("device", "jane")
        _ = try dir.add("device", "jane-tablet", ["--owntracks", "jane/tablet"])
        #expect(try dir.run(["add", "team", "field", "jane/phone", "bob/phone", "jane/tablet"]).code == 0)
        let list = try dir.run(["list"]).stdout
        let lines = list.split(separator: "\n").map(String.init)
        #expect(lines.contains("device   jane-tablet  owntracks jane/tablet (id jane.tablet)  teams field"), "\(list)")
        #expect(lines.contains { $0.hasPrefix("team field: ") && $0.contains("bob/phone (id bob.phone, login bob not added here)")
            && $0.contains("jane/phone (id jane.phone, login jane)") }, "\(list)")
        let acl = try dir.text("acl")
        let friends = { (id: String) in ["topic read owntracks/_tracker/\(id)", "topic read owntracks/_tracker/\(id)/info"] }
        #expect(Self.block("jane", in: acl) == friends("bob.phone") + friends("jane.tablet"))
        #expect(Self.block("jane-tablet", in: acl).suffix(4) == friends("jane.phone") + friends("bob.phone"))
        #expect(Self.block("bob", in: acl) == friends("jane.phone") + friends("jane.tablet"))
        // The whole team: its lines go, the logins stay.
        #expect(try dir.run(["remove", "team", "field"]).code == 0)
        let after = try dir.text("acl"), listed = try dir.run(["list"]).stdout
        let generated = Self.generatedPart(of: after)
        #expect(!generated.contains("_tracker") && !listed.contains("team "), "\(generated)\(listed)")
        #expect(Self.block("jane-tablet", in: after).count == 7)
    }

    /// `add token DEVICE` prints `DEVICE~SECRET` once (a secret tracker-http
    /// takes: ≥ 32 of A-Z a-z 0-9 - _); the files hold its hash and the
    /// device, never the secret; `list` shows it, without the secret.
    @Test func addTokenPrintsTheTokenOnceAndListShowsItsDevice() throws {
        let dir = try AccountsDirectory()
        let added = try dir.run(["add", "token", "van7"])
        #expect(added.code == 0, "\(added.stderr)")
        #expect(added.stdout.hasSuffix("\n") && added.stdout.filter { $0 == "\n" }.count == 1, "\(added.stdout)")
        let secret = try Self.tokenSecret(added.stdout, device: "van7")
        #expect(added.stderr.contains("added token ingest.van7") && added.stderr.contains("kill -HUP"), "\(added.stderr)")
        // A second token (another device) has a secret of its own.
        let other = try Self.tokenSecret(try dir.run(["add", "token", "jane.phone"]).stdout, device: "jane.phone")
        #expect(other != secret)
        let passwords = try dir.text("passwords"), registry = try dir.text("accounts.json"), acl = try dir.text("acl")
        #expect(passwords.contains("ingest.van7:$7$") && passwords.contains("ingest.jane.phone:$7$"), "\(passwords)")
        for text in [passwords, registry, acl] { #expect(!text.contains(secret) && !text.contains(other)) }
        // Its one grant; everything else it is denied is a topic of its login's own (config/acl's patterns).
        let lines = Self.block("ingest.van7", in: acl)
        #expect(lines.filter { !$0.hasPrefix("topic deny ") } == ["topic write tracker/van7/fixes"], "\(lines)")
        #expect(lines.contains("topic deny tracker/ingest.van7/fixes") && lines.contains("topic deny owntracks/ingest.van7/+"), "\(lines)")
        #expect(lines.filter { $0.hasPrefix("topic deny ") }.allSatisfy { $0.contains("/ingest.van7/") }, "\(lines)")
        // The denials are config/acl's `%u` patterns for its login, each of them (mosquitto applies them to every login).
        let patterns = try #require(AccountsDirectory.repositoryACL).split(separator: "\n").filter { $0.hasPrefix("pattern ") && $0.contains("%u") }
            .map { $0.split(separator: " ", maxSplits: 2).last.map(String.init) ?? "" }
        #expect(patterns.count >= 9)
        #expect(lines.filter { $0.hasPrefix("topic deny ") } == patterns.map { "topic deny " + $0.replacingOccurrences(of: "%u", with: "ingest.van7") })
        #expect(!(try dir.text("operators")).contains("ingest."))
        // list: kind, login and device; --json the same, never a secret.
        let list = try dir.run(["list"])
        #expect(list.stdout.split(separator: "\n").contains("token    ingest.van7        device van7"), "\(list.stdout)")
        #expect(!list.stdout.contains(secret))
        let json = try dir.run(["list", "--json"])
        let accounts = (try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])?["accounts"] as? [[String: String]]
        #expect(accounts?.first { $0["login"] == "ingest.van7" } == ["kind": "token", "login": "ingest.van7", "device": "van7"], "\(json.stdout)")
        #expect(!json.stdout.contains(secret))
        // remove token: the hash and the block go; the other token stays.
        let removed = try dir.run(["remove", "token", "van7"])
        #expect(removed.code == 0 && removed.stdout.isEmpty, "\(removed.stdout)\(removed.stderr)")
        let passwordsAfter = try dir.text("passwords"), aclAfter = try dir.text("acl")
        #expect(!passwordsAfter.contains("ingest.van7:") && passwordsAfter.contains("ingest.jane.phone:"))
        #expect(Self.block("ingest.van7", in: aclAfter).isEmpty && !Self.block("ingest.jane.phone", in: aclAfter).isEmpty)
    }

    /// A registry written before tokens (no `device` in any account) loads,
    /// takes a token, and keeps what it had.
    @Test func aRegistryFromBeforeTokensStillLoads() throws {
        let dir = try AccountsDirectory()
        let old = """
            {
              "accounts" : [
                { "kind" : "device", "login" : "jane-tablet", "owntracks" : { "device" : "tablet", "user" : "jane" } },
                { "kind" : "map", "login" : "wall" }
              ],
              "teams" : [ { "members" : [ "jane/tablet", "bob/phone" ], "name" : "field" } ],
              "version" : 1
            }
            """
        try old.write(to: dir.url.appendingPathComponent("accounts.json"), atomically: true, encoding: .utf8)
        let added = try dir.run(["add", "token", "van7"])
        #expect(added.code == 0, "\(added.stderr)")
        let list = try dir.run(["list"]).stdout
        #expect(list.contains("device   jane-tablet  owntracks jane/tablet (id jane.tablet)  teams field") && list.contains("map      wall")
                && list.contains("token    ingest.van7  device van7") && list.contains("team field: "), "\(list)")
        let acl = try dir.text("acl")
        #expect(Self.block("wall", in: acl) == Self.block("tracker-map", in: acl) && Self.block("jane-tablet", in: acl).count == 9)
    }

    /// The secret of a printed token `DEVICE~SECRET`, checked as tracker-http takes it.
    static func tokenSecret(_ stdout: String, device: String) throws -> String {
        let line = stdout.trimmingCharacters(in: .newlines)
        guard line.hasPrefix(device + "~"), !line.contains("\n") else { throw TestSupportError("not a token for \(device): '\(stdout)'") }
        let secret = String(line.dropFirst(device.count + 1))
        let allowed = secret.unicodeScalars.allSatisfy { c in
            ("A"..."Z").contains(c) || ("a"..."z").contains(c) || ("0"..."9").contains(c) || c == "-" || c == "_"
        }
        guard secret.count >= 32, allowed else { throw TestSupportError("token secret '\(secret)': not ≥ 32 of A-Z a-z 0-9 - _") }
        return secret
    }

    /// What the tool wrote: the ACL after the marker.
    static func generatedPart(of acl: String) -> String {
        acl.range(of: marker + "\n").map { String(acl[$0.upperBound...]) } ?? ""
    }

    /// The `topic` lines of a `user` block (the first one of that name).
    static func block(_ user: String, in acl: String) -> [String] {
        let lines = acl.components(separatedBy: "\n")
        guard let start = lines.firstIndex(of: "user \(user)") else { return [] }
        return Array(lines[(start + 1)...].prefix { $0.hasPrefix("topic ") })
    }

    // MARK: The broker

    /// One OwnTracks user with two devices: the app's user login and a
    /// per-device login. The broker names each connection after its login,
    /// so neither evicts the other (two on one login do: the control).
    @Test func oneUserRunsTwoDevicesOnTwoLogins() async throws {
        let dir = try AccountsDirectory()
        let ops = try dir.add("operator", "ops")
        let jane = try dir.add("device", "jane")
        let tablet = try dir.add("device", "jane-tablet", ["--owntracks", "jane/tablet"])
        let broker = try TestBroker(accounts: .init(directory: dir.url))
        let observer = try await MessageCollector(port: broker.operatorPort, filters: ["owntracks/#"], clientID: "ops-\(UUID().uuidString.prefix(6))",
                                                  username: "ops", password: ops)
        let phone = try await MessageCollector(port: broker.port, filters: ["tracker/jane/events"], username: "jane", password: jane)
        let pad = try await MessageCollector(port: broker.port, filters: ["owntracks/#", "tracker/#"], username: "jane-tablet", password: tablet)
        let drops = ReconnectCount()
        for client in [phone.client, pad.client] { client.setOnConnect { reconnect in if reconnect { drops.add() } } }
        // Both connected at once for a while, publishing in turn, every message acknowledged.
        for i in 1...20 {
            try await phone.client.publishAndWait(MQTTMessage(topic: "owntracks/jane/phone", string: Self.location("phone-\(i)")))
            try await pad.client.publishAndWait(MQTTMessage(topic: "owntracks/jane/tablet", string: Self.location("tablet-\(i)")))
        }
        try await observer.wait(description: "20 from each device") { all in
            all.filter { $0.topic == "owntracks/jane/phone" }.count >= 20 && all.filter { $0.topic == "owntracks/jane/tablet" }.count >= 20
        }
        #expect(drops.value == 0 && phone.client.isConnected && pad.client.isConnected)

        // The tablet's login cannot publish as the phone (QoS 0: nothing to refuse out loud); its own next publish arrives.
        try pad.client.publish(MQTTMessage(topic: "owntracks/jane/phone", string: Self.location("forged-by-tablet"), qos: .atMostOnce))
        try await pad.client.publishAndWait(MQTTMessage(topic: "owntracks/jane/tablet", string: Self.location("after-the-forgery")))
        try await observer.wait(description: "the tablet's publish after the forgery") { $0.contains { $0.string.contains("after-the-forgery") } }
        #expect(!observer.messages.contains { $0.string.contains("forged-by-tablet") })

        // It reads its own commands, events and live frame, not the phone's.
        let ctl = try await Self.connect(broker.operatorPort, "ops", ops)
        for (topic, payload) in [("owntracks/jane/phone/cmd", "phone-cmd"), ("tracker/jane.phone/events", "phone-event"),
                                 ("owntracks/jane/tablet/cmd", "tablet-cmd"), ("tracker/jane.tablet/events", "tablet-event"),
                                 ("tracker/jane.tablet/live", "tablet-live")] {
            try await ctl.publishAndWait(MQTTMessage(topic: topic, string: payload))
        }
        try await pad.wait(description: "the tablet's own command, event and live frame") { all in
            ["tablet-cmd", "tablet-event", "tablet-live"].allSatisfy { tag in all.contains { $0.string == tag } }
        }
        #expect(!pad.messages.contains { $0.string.hasPrefix("phone-") || $0.topic == "owntracks/jane/phone" })
        #expect(drops.value == 0 && phone.client.isConnected && pad.client.isConnected)

        // The control: a second connection on the phone's login, asking for a client id of its own, still takes
        // the phone's place: the broker names every connection after its login.
        let twin = try await Self.connect(broker.port, "jane", jane)
        try await Self.eventually("the phone's connection replaced by its twin") { drops.value > 0 || !phone.client.isConnected }
        await twin.disconnect(timeout: .seconds(2))
        await ctl.disconnect()
        for collector in [observer, phone, pad] { await collector.close() }
    }

    /// Friends: each member reads every other member of its teams on
    /// `owntracks/_tracker/{id}`, with the apps' own wildcard subscriptions,
    /// and nothing of another team; removing a member ends it after a SIGHUP.
    @Test func teamMembersReadOnlyTheirFriends() async throws {
        let dir = try AccountsDirectory()
        let ops = try dir.add("operator", "ops")
        let jane = try dir.add("device", "jane"), carol = try dir.add("device", "carol")
        _ = try dir.add("device", "bob")
        #expect(try dir.run(["add", "team", "field", "jane/phone", "bob/phone"]).code == 0)
        #expect(try dir.run(["add", "team", "other", "carol/phone"]).code == 0)
        let broker = try TestBroker(accounts: .init(directory: dir.url))
        let ctl = try await Self.connect(broker.operatorPort, "ops", ops)
        // What the track service publishes: each device's latest position, retained, and its card.
        for user in ["jane", "bob", "carol"] {
            let id = DeviceID.ownTracks(user: user, device: "phone")
            try await ctl.publishAndWait(MQTTMessage(topic: "owntracks/_tracker/\(id)", string: Self.location("\(user)-retained"), retain: true))
            try await ctl.publishAndWait(MQTTMessage(topic: "owntracks/_tracker/\(id)/info", string: #"{"_type":"card","name":"\#(user)-card"}"#, retain: true))
        }
        let friendFilters = ["owntracks/+/+", "owntracks/+/+/info"]
        let janeApp = try await MessageCollector(port: broker.port, filters: friendFilters + ["tracker/jane/events"], username: "jane", password: jane)
        let carolApp = try await MessageCollector(port: broker.port, filters: friendFilters + ["tracker/carol/events"], username: "carol", password: carol)
        // After the retained ones: a live position of bob's for jane, an event of her own for carol.
        try await ctl.publishAndWait(MQTTMessage(topic: "owntracks/_tracker/bob.phone", string: Self.location("bob-live")))
        try await ctl.publishAndWait(MQTTMessage(topic: "tracker/carol/events", string: "carol-control"))
        try await janeApp.wait(description: "bob's live position") { $0.contains { $0.string.contains("bob-live") } }
        try await carolApp.wait(description: "carol's own event") { $0.contains { $0.string == "carol-control" } }
        let janeGot = janeApp.messages.map(\.string)
        #expect(janeGot.contains { $0.contains("bob-retained") } && janeGot.contains { $0.contains("bob-card") }, "\(janeGot)")
        #expect(!janeGot.contains { $0.contains("carol-") || $0.contains("jane-") }, "\(janeGot)")
        #expect(!carolApp.messages.contains { $0.topic.hasPrefix("owntracks/") }, "\(carolApp.messages.map(\.topic))")

        // bob leaves the team: after the SIGHUP jane no longer reads him, while her own event still arrives.
        let removed = try dir.run(["remove", "team", "field", "bob/phone"])
        #expect(removed.code == 0, "\(removed.stderr)")
        #expect(!Self.generatedPart(of: try dir.text("acl")).contains("bob.phone"))
        broker.reload()
        var round = 0
        try await Self.eventually("jane cut off from bob") {
            round += 1
            let bobTag = "bob-after-\(round)", control = "control-\(round)"
            try await ctl.publishAndWait(MQTTMessage(topic: "owntracks/_tracker/bob.phone", string: Self.location(bobTag)))
            try await ctl.publishAndWait(MQTTMessage(topic: "tracker/jane/events", string: control))
            try await janeApp.wait(description: control) { $0.contains { $0.string == control } }
            return !janeApp.messages.contains { $0.string.contains(bobTag) }
        }
        await ctl.disconnect()
        await janeApp.close()
        await carolApp.close()
    }

    /// mosquitto's `topic` takes the rest of the line: an OwnTracks name with
    /// a space and an apostrophe needs no quoting in the ACL.
    @Test func aDeviceNameWithASpaceAndAnApostropheWorks() async throws {
        let dir = try AccountsDirectory()
        let ops = try dir.add("operator", "ops")
        let user = "jane@example.com", device = "Jane's iPhone"
        let app = try dir.add("device", "jane-iphone", ["--owntracks", "\(user)/\(device)"])
        let id = DeviceID.ownTracks(user: user, device: device)
        #expect(id.rawValue == "jane_40example_2ecom_2fJane_27s_20iPhone")
        #expect(try dir.text("acl").contains("user jane-iphone\ntopic write owntracks/\(user)/\(device)\n"))
        let broker = try TestBroker(accounts: .init(directory: dir.url))
        let observer = try await MessageCollector(port: broker.operatorPort, filters: ["owntracks/#"], clientID: "ops-\(UUID().uuidString.prefix(6))",
                                                  username: "ops", password: ops)
        let phone = try await MessageCollector(port: broker.port, filters: ["owntracks/#", "tracker/#"], username: "jane-iphone", password: app)
        // Another device of the same user is not its to publish; its own topic and sub-topics are.
        try phone.client.publish(MQTTMessage(topic: "owntracks/\(user)/Jane's iPad", string: Self.location("not-mine"), qos: .atMostOnce))
        try await phone.client.publishAndWait(MQTTMessage(topic: "owntracks/\(user)/\(device)", string: Self.location("mine")))
        try await phone.client.publishAndWait(MQTTMessage(topic: "owntracks/\(user)/\(device)/event", string: #"{"_type":"transition","tag":"my-event"}"#))
        try await observer.wait(description: "its location and event") { all in
            all.contains { $0.topic == "owntracks/\(user)/\(device)" && $0.string.contains("mine") }
                && all.contains { $0.topic == "owntracks/\(user)/\(device)/event" }
        }
        #expect(!observer.messages.contains { $0.string.contains("not-mine") })
        // It reads its own command and its Tracker device's events, not the iPad's.
        let ctl = try await Self.connect(broker.operatorPort, "ops", ops)
        try await ctl.publishAndWait(MQTTMessage(topic: "owntracks/\(user)/Jane's iPad/cmd", string: "ipad-cmd"))
        try await ctl.publishAndWait(MQTTMessage(topic: "owntracks/\(user)/\(device)/cmd", string: "iphone-cmd"))
        try await ctl.publishAndWait(MQTTMessage(topic: "tracker/\(id)/events", string: "iphone-event"))
        try await phone.wait(description: "its command and event") { all in
            all.contains { $0.topic == "owntracks/\(user)/\(device)/cmd" && $0.string == "iphone-cmd" } && all.contains { $0.string == "iphone-event" }
        }
        #expect(!phone.messages.contains { $0.string == "ipad-cmd" })
        await ctl.disconnect()
        await observer.close()
        await phone.close()
    }

    /// A removed login is refused after the SIGHUP (its live connection closed
    /// too); a map login reads live frames, not fixes; an operator logs in on
    /// the operators' listener only.
    @Test func removeMapAndOperatorOnTheBroker() async throws {
        let dir = try AccountsDirectory()
        let ops = try dir.add("operator", "ops")
        let van7 = try dir.add("device", "van7"), van8 = try dir.add("device", "van8")
        let wall = try dir.add("map", "wall")
        let broker = try TestBroker(accounts: .init(directory: dir.url))

        // remove device + SIGHUP.
        let live = try await Self.connect(broker.port, "van7", van7)
        #expect(try dir.run(["remove", "device", "van7"]).code == 0)
        #expect(!(try dir.text("passwords")).contains("van7:"))
        broker.reload()
        try await Self.eventually("van7 refused") { !(await Self.canLogIn(broker.port, "van7", van7)) }
        try await Self.eventually("van7's live connection closed") { !live.isConnected }
        await live.disconnect(timeout: .seconds(1))
        #expect(await Self.canLogIn(broker.port, "van8", van8))

        // A map login: live frames and events, no fixes.
        let map = try await MessageCollector(port: broker.port, filters: ["tracker/#"], username: "wall", password: wall)
        let ctl = try await Self.connect(broker.operatorPort, "ops", ops)
        try await ctl.publishAndWait(MQTTMessage(topic: "tracker/x/fixes", string: "a-fix"))
        try await ctl.publishAndWait(MQTTMessage(topic: "tracker/x/raw", string: "a-raw-fix"))
        try await ctl.publishAndWait(MQTTMessage(topic: "tracker/x/live", string: "a-live-frame"))
        try await map.wait(description: "the live frame") { $0.contains { $0.topic == "tracker/x/live" && $0.string == "a-live-frame" } }
        #expect(!map.messages.contains { $0.topic == "tracker/x/fixes" || $0.topic == "tracker/x/raw" })
        await map.close()

        // An operator: the operators' listener admits it (it was the observer above); a device is not admitted there,
        // and the operator's login is not on the devices' listener.
        let added = try dir.add("operator", "ops-jane")
        broker.reload()
        try await Self.eventually("ops-jane admitted on the operators' listener") { await Self.canLogIn(broker.operatorPort, "ops-jane", added) }
        #expect(!(await Self.canLogIn(broker.operatorPort, "van8", van8)))
        #expect(!(await Self.canLogIn(broker.port, "ops-jane", added)))
        await ctl.disconnect()
    }

    /// An ingest token, as tracker-http uses it for Traccar Client: the login
    /// `ingest.van7` with the token's secret publishes van7's fixes and
    /// nothing else, and reads nothing at all. Each refusal is checked beside
    /// something allowed that arrives after it.
    @Test func aTokenPublishesItsDevicesFixesAndReadsNothing() async throws {
        let dir = try AccountsDirectory()
        let ops = try dir.add("operator", "ops")
        let van7 = try dir.add("device", "van7")  // the device's own login: what may read, for the controls
        let added = try dir.run(["add", "token", "van7"])
        #expect(added.code == 0, "\(added.stderr)")
        let secret = try Self.tokenSecret(added.stdout, device: "van7")
        let broker = try TestBroker(accounts: .init(directory: dir.url))
        // Where tracker-http logs in for it, and the devices' listener; not the operators'.
        #expect(await Self.canLogIn(broker.gatePort, "ingest.van7", secret))
        #expect(!(await Self.canLogIn(broker.operatorPort, "ingest.van7", secret)))
        #expect(!(await Self.canLogIn(broker.port, "ingest.van7", "not-the-secret-\(secret)")))

        let observer = try await MessageCollector(port: broker.operatorPort, filters: ["tracker/#", "owntracks/#"],
                                                  clientID: "ops-\(UUID().uuidString.prefix(6))", username: "ops", password: ops)
        let token = try await MessageCollector(port: broker.port, filters: ["#", "tracker/van7/events"], username: "ingest.van7", password: secret)
        let device = try await MessageCollector(port: broker.port, filters: ["tracker/#", "owntracks/#"], username: "van7", password: van7)

        // Its device's fixes, QoS 1, acknowledged and delivered.
        try await token.client.publishAndWait(MQTTMessage(topic: "tracker/van7/fixes", string: "token-fix-1"))
        try await observer.wait(description: "the token's fix") { $0.contains { $0.topic == "tracker/van7/fixes" && $0.string == "token-fix-1" } }

        // Nowhere else (QoS 0: nothing to refuse out loud): another device, its login's own topics that
        // config/acl's patterns would give it, van7's other topics. Then its own next fix arrives.
        let forged = ["tracker/van8/fixes", "tracker/ingest.van7/fixes", "tracker/ingest.van7/cmd/getSessions", "owntracks/ingest.van7/phone",
                      "owntracks/ingest.van7/phone/event", "tracker/van7/activity", "tracker/van7/cmd/getSessions", "tracker/van7/raw",
                      "owntracks/van7/phone"]
        for topic in forged { try token.client.publish(MQTTMessage(topic: topic, string: "forged-by-token", qos: .atMostOnce)) }
        try await token.client.publishAndWait(MQTTMessage(topic: "tracker/van7/fixes", string: "token-fix-2"))
        try await observer.wait(description: "the token's fix after the forgeries") { $0.contains { $0.string == "token-fix-2" } }
        #expect(!observer.messages.contains { $0.string == "forged-by-token" }, "\(observer.messages.filter { $0.string == "forged-by-token" }.map(\.topic))")
        #expect(token.client.isConnected)

        // It reads nothing: what the operator publishes for van7 (and for its login's own topics) reaches
        // van7's own login, not the token's, subscribed to everything.
        let ctl = try await Self.connect(broker.operatorPort, "ops", ops)
        let probes = ["tracker/van7/events", "tracker/van7/live", "tracker/van7/reply/x", "tracker/van7/fixes", "tracker/ingest.van7/events",
                      "tracker/ingest.van7/live", "tracker/ingest.van7/reply/x", "owntracks/ingest.van7/phone/cmd", "tracker/_map/ingest.van7/x"]
        for topic in probes { try await ctl.publishAndWait(MQTTMessage(topic: topic, string: "probe \(topic)")) }
        try await device.wait(description: "van7's event, live frame and reply") { all in
            ["tracker/van7/events", "tracker/van7/live", "tracker/van7/reply/x"].allSatisfy { topic in all.contains { $0.string == "probe \(topic)" } }
        }
        // A round trip on the token's connection: anything the broker had sent it would be in before the acknowledgement.
        try await token.client.publishAndWait(MQTTMessage(topic: "tracker/van7/fixes", string: "token-fix-3"))
        try await observer.wait(description: "the token's third fix") { $0.contains { $0.string == "token-fix-3" } }
        #expect(token.messages.isEmpty, "\(token.messages.map(\.topic))")
        #expect(token.client.isConnected)
        await ctl.disconnect()
        for collector in [observer, token, device] { await collector.close() }
    }

    /// `remove token` and a SIGHUP: the token's login is refused, its live
    /// connection closed; the device's own login is not touched.
    @Test func aRemovedTokenIsRefusedAfterTheSIGHUP() async throws {
        let dir = try AccountsDirectory()
        let van7 = try dir.add("device", "van7")
        let secret = try Self.tokenSecret(try dir.run(["add", "token", "van7"]).stdout, device: "van7")
        let broker = try TestBroker(accounts: .init(directory: dir.url))
        let live = try await Self.connect(broker.port, "ingest.van7", secret)
        #expect(await Self.canLogIn(broker.gatePort, "ingest.van7", secret))
        let removed = try dir.run(["remove", "token", "van7"])
        #expect(removed.code == 0, "\(removed.stderr)")
        let passwords = try dir.text("passwords"), acl = try dir.text("acl")
        #expect(!passwords.contains("ingest.van7:") && Self.block("ingest.van7", in: acl).isEmpty)
        broker.reload()
        try await Self.eventually("the token refused") { !(await Self.canLogIn(broker.port, "ingest.van7", secret)) }
        #expect(!(await Self.canLogIn(broker.gatePort, "ingest.van7", secret)))
        try await Self.eventually("the token's live connection closed") { !live.isConnected }
        await live.disconnect(timeout: .seconds(1))
        #expect(await Self.canLogIn(broker.port, "van7", van7))
        // A new token for the device works again, with a new secret.
        let again = try Self.tokenSecret(try dir.run(["add", "token", "van7"]).stdout, device: "van7")
        #expect(again != secret)
        broker.reload()
        try await Self.eventually("the new token admitted") { await Self.canLogIn(broker.port, "ingest.van7", again) }
        #expect(!(await Self.canLogIn(broker.port, "ingest.van7", secret)))
    }

    // MARK: Refusals

    /// Each case exits 2 with one line naming the problem, and no file changes.
    @Test func refusalsExitTwoAndLeaveEveryFileAsItWas() throws {
        let dir = try AccountsDirectory()
        _ = try dir.add("device", "jane")
        _ = try dir.add("device", "jane-tablet", ["--owntracks", "jane/tablet"])
        _ = try dir.add("map", "wall")
        #expect(try dir.run(["add", "team", "field", "jane/phone", "bob/phone"]).code == 0)
        // A login made by hand, outside the tool.
        let tool = Process()
        tool.executableURL = URL(fileURLWithPath: "/usr/bin/mosquitto_passwd")
        tool.arguments = ["-b", dir.url.appendingPathComponent("passwords").path, "van7", "by hand"]
        try tool.run()
        tool.waitUntilExit()
        #expect(tool.terminationStatus == 0)
        // A token's login made by hand too.
        let handMadeToken = Process()
        handMadeToken.executableURL = URL(fileURLWithPath: "/usr/bin/mosquitto_passwd")
        handMadeToken.arguments = ["-b", dir.url.appendingPathComponent("passwords").path, "ingest.van10", "by hand"]
        try handMadeToken.run()
        handMadeToken.waitUntilExit()
        #expect(handMadeToken.terminationStatus == 0)
        #expect(try dir.run(["add", "token", "van9"]).code == 0)
        let before = try dir.snapshot()
        let long = String(repeating: "a", count: 65)
        let cases: [([String], String)] = [
            (["add", "device", "_van"], "not valid"), (["add", "device", "-van"], "not valid"), (["add", "device", "van 7"], "not valid"),
            (["add", "device", "van/7"], "not valid"), (["add", "device", long], "not valid"), (["add", "device", "vän"], "not valid"), (["add", "device", "van\n7"], "not valid"),
            (["add", "team", "bad\nname", "jane/phone"], "team name"),
            (["add", "device", "tracker-gateway"], "reserved"), (["add", "device", "tracker-uploader-out"], "reserved"),
            (["add", "operator", "trackerctl"], "reserved"), (["add", "map", "tracker-map"], "reserved"), (["add", "map", "tracker-http"], "reserved"),
            (["add", "device", "jane"], "already exists"), (["add", "operator", "wall"], "already exists"),
            (["add", "device", "van7"], "already exists"),
            (["add", "device", "jane-2", "--owntracks", "jane/tablet"], "already has the login"),
            (["remove", "device", "nobody"], "no device"), (["remove", "device", "wall"], "is a map"),
            (["remove", "operator", "van7"], "no operator"),
            (["add", "robot", "r2"], "unknown kind"), (["remove", "robot", "r2"], "unknown kind"), (["frobnicate"], "unknown action"),
            (["add", "device", "x", "--owntracks", "jane"], "not USER/DEVICE"), (["add", "device", "x", "--owntracks", "/phone"], "user is empty"),
            (["add", "device", "x", "--owntracks", "jane/"], "device is empty"), (["add", "device", "x", "--owntracks", "jane/a/b"], "contains '/'"),
            (["add", "device", "x", "--owntracks", "ja+ne/phone"], "wildcard"), (["add", "device", "x", "--owntracks", "jane/ph#one"], "wildcard"),
            (["add", "device", "x", "--owntracks", "jane/pho\nne"], "control character"), (["add", "device", "x", "--owntracks", "jane/phone "], "space"),
            (["add", "device", "x", "--owntracks", "_tracker/phone"], "reserved"), (["add", "map", "x", "--owntracks", "jane/phone"], "--owntracks"),
            (["add", "team", "field", "a b"], "neither USER/DEVICE"), (["add", "team", "field", "_fleet"], "neither USER/DEVICE"),
            (["add", "team", "field", "jane/phone/x"], "contains '/'"), (["add", "team", "field", "_tracker/x"], "reserved"),
            (["add", "team", "field", "bob/+"], "wildcard"), (["add", "team", "field", "bob/phone"], "already has"),
            (["add", "team", "field", "bob.phone"], "already has"), (["add", "team", "field", "carol/phone", "carol/phone"], "already has"),
            (["add", "team", "field", "tracker-track"], "reserved"), (["add", "team", "bad name", "jane/phone"], "team name"),
            (["add", "team", long, "jane/phone"], "team name"), (["add", "team", "a/b", "jane/phone"], "team name"),
            (["add", "team", "field"], "at least one MEMBER"), (["remove", "team", "nope"], "no team"),
            (["remove", "team", "field", "carol/phone"], "no member"), (["add", "device", "x", "--password", ""], "--password"),
            // Tokens.
            (["add", "token", "_van"], "not a device id"), (["add", "token", "van 7"], "not a device id"), (["add", "token", "van/7"], "not a device id"),
            (["add", "token", "van7~x"], "not a device id"), (["add", "token", long], "not a device id"), (["add", "token", ""], "not a device id"),
            (["add", "token", "tracker-gateway"], "reserved"), (["add", "token", "tracker-http"], "reserved"),
            (["add", "token", "van9"], "already has a token; remove it first"),
            (["add", "token", "van10"], "not added by this tool"),
            (["add", "token", "van8", "--password", "chosen by hand"], "--password"), (["add", "token", "van9", "--password", "x"], "--password"),
            (["add", "token", "van8", "--owntracks", "van/eight"], "--owntracks"), (["add", "token"], "needs DEVICE"),
            (["add", "device", "ingest.x"], "ingest tokens"), (["add", "device", "ingest.van9"], "ingest tokens"),
            (["add", "map", "ingest.x"], "ingest tokens"), (["add", "operator", "ingest.x"], "ingest tokens"),
            (["add", "device", "ingest.x", "--password", "p"], "ingest tokens"),
            (["add", "team", "field", "ingest.van9"], "ingest tokens"), (["add", "team", "field", "ingest.van9/phone"], "ingest tokens"),
            (["remove", "token", "van8"], "has no token"), (["remove", "token", "_van"], "not a device id"),
            (["remove", "device", "ingest.van9"], "is a token"), (["remove", "token", "van9", "--password", "x"], "--password"),
        ]
        for (arguments, problem) in cases {
            let run = try dir.run(arguments)
            let line = run.stderr.trimmingCharacters(in: .newlines)
            #expect(run.code == 2, "\(arguments): \(run.code) \(run.stderr)")
            #expect(line.contains(problem) && !line.contains("\n"), "\(arguments): \(run.stderr)")
            #expect(run.stdout.isEmpty, "\(arguments): \(run.stdout)")
            #expect(try dir.snapshot() == before, "\(arguments) changed a file")
        }
        // The positive control: the same directory takes a valid change.
        #expect(try dir.run(["add", "team", "field", "carol/phone"]).code == 0)
        #expect(try dir.snapshot() != before)

        // Without an ACL to start from, nothing is made at all.
        let empty = try AccountsDirectory(acl: nil)
        let run = try empty.run(["add", "device", "van9"])
        #expect(run.code == 2 && run.stderr.contains("config/acl") && run.stderr.contains("does not exist"), "\(run.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: empty.url.path).isEmpty)
    }

    // MARK: Helpers

    static func location(_ tag: String) -> String { #"{"_type":"location","lat":48.1,"lon":11.5,"acc":5,"tst":1790000000,"tag":"\#(tag)"}"# }

    static func connect(_ port: Int32, _ login: String, _ password: String) async throws -> MQTTClient {
        let client = try MQTTClient(MQTTOptions(port: port, clientID: "\(login)-\(UUID().uuidString.prefix(6))", cleanStart: true,
                                                username: login, password: password))
        try await client.connect(timeout: .seconds(5))
        return client
    }

    static func canLogIn(_ port: Int32, _ login: String, _ password: String) async -> Bool {
        guard let client = try? MQTTClient(MQTTOptions(port: port, clientID: "\(login)-\(UUID().uuidString.prefix(6))", cleanStart: true,
                                                       username: login, password: password)) else { return false }
        // A refused login throws on the first attempt; the client keeps trying until it is stopped.
        let admitted: Bool
        do { try await client.connect(timeout: .seconds(5)); admitted = true } catch { admitted = false }
        await client.disconnect(timeout: .seconds(1))
        return admitted
    }

    /// Polls `condition` until it holds, for at most `timeout` seconds.
    static func eventually(_ what: String, timeout: Double = 15, _ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + .milliseconds(Int64(timeout * 1000))
        while ContinuousClock.now < deadline {
            // Each check is a round trip to the broker: asking again at once is the poll.
            if try await condition() { return }
            await Task.yield()
        }
        throw TestSupportError("timed out after \(timeout) s waiting for \(what)")
    }
}

/// A directory for `trackerctl accounts`, with a copy of the repository's config/acl.
final class AccountsDirectory: Sendable {
    let url: URL

    struct Run { let code: Int32; let stdout: String; let stderr: String }

    init(acl: String? = AccountsDirectory.repositoryACL) throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("tracker-accounts-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        if let acl {
            let file = url.appendingPathComponent("acl")
            try acl.write(to: file, atomically: true, encoding: .utf8)
            try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: file.path)
        }
    }

    static var repositoryACL: String? { try? String(contentsOf: Repository.root.appendingPathComponent("config/acl"), encoding: .utf8) }

    deinit { try? FileManager.default.removeItem(at: url) }

    /// The built `trackerctl accounts`, on this directory (`--dir`, or `TRACKER_ACCOUNTS_DIR`).
    func run(_ arguments: [String], viaEnvironment: Bool = false) throws -> Run {
        let process = Process()
        process.executableURL = ServiceHarness.binaryDirectory.appendingPathComponent("trackerctl")
        var environment = ProcessInfo.processInfo.environment
        environment["TRACKER_ACCOUNTS_DIR"] = viaEnvironment ? url.path : nil
        process.environment = environment
        process.arguments = ["accounts"] + (viaEnvironment ? [] : ["--dir", url.path]) + arguments
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let stdout = out.fileHandleForReading.readDataToEndOfFile(), stderr = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Run(code: process.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self), stderr: String(decoding: stderr, as: UTF8.self))
    }

    /// Adds a login with a generated password and returns that password.
    func add(_ kind: String, _ login: String, _ options: [String] = []) throws -> String {
        let run = try run(["add", kind, login] + options)
        let words = run.stdout.trimmingCharacters(in: .newlines).split(separator: " ")
        guard run.code == 0, words.count == 2, words[0] == login else {
            throw TestSupportError("add \(kind) \(login): \(run.code) \(run.stdout) \(run.stderr)")
        }
        return String(words[1])
    }

    func text(_ name: String) throws -> String { try String(contentsOf: url.appendingPathComponent(name), encoding: .utf8) }

    func mode(_ name: String) throws -> Int {
        let attributes = try FileManager.default.attributesOfItem(atPath: url.appendingPathComponent(name).path)
        return (attributes[.posixPermissions] as? NSNumber)?.intValue ?? -1
    }

    /// Every file's bytes.
    func snapshot() throws -> [String: Data] {
        var files: [String: Data] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: url.path) {
            files[name] = try Data(contentsOf: url.appendingPathComponent(name))
        }
        return files
    }
}

final class ReconnectCount: Sendable {
    private let count = Mutex(0)
    func add() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}
