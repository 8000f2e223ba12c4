import Bus
import Foundation
import Model
import TestSupport
import Testing

extension HeavySuites {
    /// OwnTracks apps as a team sees them, on the product's broker config with
    /// an ACL that `trackerctl accounts` wrote: real paho-mqtt apps (MQTT
    /// 3.1.1) see their teammates' accepted positions and nobody else's, answer
    /// `reportLocation`, and one user runs a phone and a tablet at once.
    @Suite(.serialized) struct OwnTracksTeamTests {
        /// login → (OwnTracks user, device); jane's tablet has a login of its own.
        static let apps: [(login: String, user: String, device: String)] = [
            ("jane", "jane", "phone"), ("jane-tablet", "jane", "tablet"), ("bob", "bob", "phone"),
            ("carol", "carol", "phone"), ("dave", "dave", "phone"),
        ]
        static let passwords = Dictionary(uniqueKeysWithValues: apps.map { ($0.login, "pw-\($0.login)-\(UUID().uuidString.prefix(8))") })

        /// Runs `trackerctl accounts --dir DIR …`; fails the test on a non-zero exit.
        static func accounts(_ dir: URL, _ arguments: [String]) throws {
            let process = try ChildProcess(executable: ServiceHarness.binaryDirectory.appendingPathComponent("trackerctl").path,
                                           arguments: ["accounts", "--dir", dir.path] + arguments,
                                           logFile: dir.appendingPathComponent("accounts.log").path)
            let code = process.wait(timeout: 30)
            guard code == 0 else { throw TestSupportError("trackerctl accounts \(arguments.joined(separator: " ")): exit \(code ?? -1)\n\(process.log)") }
        }

        /// The product's ACL with the five apps' logins and two teams, as the accounts tool writes it.
        static func acl() throws -> String {
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("team-accounts-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            try FileManager.default.copyItem(at: Repository.root.appendingPathComponent("config/acl"), to: dir.appendingPathComponent("acl"))
            for app in apps {
                let own = app.login == app.user ? [] : ["--owntracks", "\(app.user)/\(app.device)"]
                try accounts(dir, ["add", "device", app.login, "--password", passwords[app.login]!] + own)
            }
            try accounts(dir, ["add", "team", "field", "jane/phone", "jane/tablet", "bob/phone"])
            try accounts(dir, ["add", "team", "other", "carol/phone", "dave/phone"])
            return dir.appendingPathComponent("acl").path
        }

        static func friend(_ device: String) -> String { "owntracks/_tracker/\(device)" }

        /// One app looking at its friends (Tests/Clients/owntracks_friends.py).
        static func viewer(_ login: String, until: [String], answers: Int, in directory: URL, port: Int32) throws -> ChildProcess {
            let app = try #require(apps.first { $0.login == login })
            return try ChildProcess(executable: "/usr/bin/python3", arguments: [
                Repository.root.appendingPathComponent("Tests/Clients/owntracks_friends.py").path, "127.0.0.1", "\(port)",
                login, passwords[login]!, app.user, app.device, until.isEmpty ? "-" : until.joined(separator: ","), "\(answers)", "60",
            ], logFile: directory.appendingPathComponent("friends-\(login).log").path)
        }

        /// Asks `check` again until it gives a value, for at most `timeout` seconds.
        static func poll<T>(timeout: Double = 30, description: String, _ check: () async throws -> T?) async throws -> T {
            let deadline = ContinuousClock.now + .milliseconds(Int64(timeout * 1000))
            while ContinuousClock.now < deadline {
                if let value = try await check() { return value }
            }
            throw TestSupportError("timed out after \(timeout) s waiting for \(description)")
        }

        static func result(_ process: ChildProcess) throws -> [String: Any] {
            try #require(process.log.split(separator: "\n").last.flatMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }, "\(process.log)")
        }

        @Test func teammatesSeeEachOthersAcceptedPositionsAndNobodyElse() async throws {
            let constellation = try Constellation(logins: true, config: ["gateway": ["ownTracksGeofences": true]],
                                                  accounts: Self.passwords, aclFile: try Self.acl())
            try await constellation.start()
            defer { constellation.stop() }
            let port = constellation.broker.port
            let friends = try await constellation.collector(["owntracks/_tracker/#"])
            let janes = try await constellation.collector(["tracker/jane.phone/raw"])
            // Every app publishes its location once (the viewers below publish it first), and jane a region.
            let publishers = try Self.apps.map { app in
                try Self.viewer(app.login, until: [], answers: 0, in: constellation.broker.directory, port: port)
            }
            for p in publishers { #expect(p.wait(timeout: 60) == 0, "\(p.log)") }
            let waypoint = constellation.broker.directory.appendingPathComponent("waypoint.json")
            try JSONSerialization.data(withJSONObject: [["owntracks/jane/phone/waypoint",
                #"{"_type":"waypoint","desc":"Home","rid":"h1","lat":48.137,"lon":11.575,"rad":100,"tst":1700000000}"#, false]]).write(to: waypoint)
            let region = try ChildProcess(executable: "/usr/bin/python3", arguments: [
                Repository.root.appendingPathComponent("Tests/Clients/owntracks_publish.py").path, "127.0.0.1", "\(port)",
                "jane", waypoint.path, "jane", Self.passwords["jane"]!], logFile: constellation.broker.directory.appendingPathComponent("waypoint.log").path)
            #expect(region.wait(timeout: 60) == 0, "\(region.log)")
            // The track service has published every device's accepted position and card.
            let ids = ["jane.phone", "jane.tablet", "bob.phone", "carol.phone", "dave.phone"]
            try await friends.wait(timeout: 30, description: "five friend positions and cards") { messages in
                ids.allSatisfy { id in messages.contains { $0.topic == Self.friend(id) } && messages.contains { $0.topic == Self.friend(id) + "/info" } }
            }
            // Now each app looks; jane's also answers reportLocation, asked until it has.
            let dir = constellation.broker.directory
            let jane = try Self.viewer("jane", until: ["bob.phone", "bob.phone/info", "jane.tablet"].map(Self.friend), answers: 1, in: dir, port: port)
            let tablet = try Self.viewer("jane-tablet", until: ["jane.phone", "bob.phone"].map(Self.friend), answers: 0, in: dir, port: port)
            let bob = try Self.viewer("bob", until: ["jane.phone", "jane.tablet"].map(Self.friend), answers: 0, in: dir, port: port)
            let carol = try Self.viewer("carol", until: ["dave.phone", "dave.phone/info"].map(Self.friend), answers: 0, in: dir, port: port)
            let ctl = try await constellation.operatorClient()
            let deadline = ContinuousClock.now + .seconds(60)
            var asked = 0
            let askedFromMs = Int64(Date().timeIntervalSince1970 * 1000)
            while jane.wait(timeout: 0.5) == nil, ContinuousClock.now < deadline {
                let reply = try await TestClient.command(ctl, device: "jane.phone", "reportLocation")
                #expect(reply.ok && reply.result?["topic"] == .string("owntracks/jane/phone/cmd"), "\(reply)")
                asked += 1
            }
            for viewer in [jane, tablet, bob, carol] { #expect(viewer.wait(timeout: 60) == 0, "\(viewer.log)") }
            let seen = try [jane, tablet, bob, carol].map { try Self.result($0) }
            for (login, result) in zip(["jane", "jane-tablet", "bob", "carol"], seen) {
                #expect(result["barrier"] as? Bool == true, "\(login): \(result)")
                #expect((result["drops"] as? [String])?.isEmpty == true, "\(login) was dropped: \(result)")
            }
            func topics(_ i: Int) -> Set<String> { Set((seen[i]["seen"] as? [String: String] ?? [:]).keys.filter { $0.hasPrefix("owntracks/_tracker/") }) }
            // Each sees its teammates (their positions and cards) and nobody else; never itself.
            let field = ["jane.phone", "jane.tablet", "bob.phone"], other = ["carol.phone", "dave.phone"]
            func expected(_ ids: [String]) -> Set<String> { Set(ids.flatMap { [Self.friend($0), Self.friend($0) + "/info"] }) }
            #expect(topics(0) == expected(["jane.tablet", "bob.phone"]), "jane: \(topics(0))")
            #expect(topics(1) == expected(["jane.phone", "bob.phone"]), "jane-tablet: \(topics(1))")
            #expect(topics(2) == expected(["jane.phone", "jane.tablet"]), "bob: \(topics(2))")
            #expect(topics(3) == expected(["dave.phone"]), "carol: \(topics(3))")
            #expect(topics(3).isDisjoint(with: expected(field)) && topics(0).isDisjoint(with: expected(other)))
            // What a friend looks like: an OwnTracks location of the accepted point, and its card.
            let janeSaw = seen[0]["seen"] as? [String: String] ?? [:]
            let bobsPosition = try JSONSerialization.jsonObject(with: Data((janeSaw[Self.friend("bob.phone")] ?? "").utf8)) as? [String: Any]
            #expect(bobsPosition?["_type"] as? String == "location" && bobsPosition?["tid"] as? String == "BP"
                    && bobsPosition?["lat"] as? Double == 48.137, "\(bobsPosition ?? [:])")
            #expect(janeSaw[Self.friend("bob.phone") + "/info"] == #"{"_type":"card","name":"phone (bob)","tid":"BP"}"#)
            // jane's app was asked for its position and answered: a new fix of jane.phone, received after the asking.
            #expect(seen[0]["answered"] as? Int ?? 0 >= 1 && asked >= 1)
            try await janes.wait(timeout: 30, description: "jane's answer taken by the gateway") { messages in
                messages.contains { $0.topic.hasSuffix("/raw") && (try? JSONCoding.decoder.decode(RawFix.self, from: Data($0.payload)))
                    .map { $0.receivedMs >= askedFromMs } == true }
            }
            // jane's region is kept by the gateway and armed by the motion service.
            let regions = try await TestClient.command(ctl, device: "jane.phone", "getRegions")
            #expect(regions.result?.arrayValue?.first?["fenceID"] == .string("ot-h1"), "\(regions)")
            let fences = try await Self.poll(description: "ot-h1 armed") {
                let reply = try await TestClient.command(ctl, device: "jane.phone", "getGeofences")
                return reply.result?.arrayValue?.contains { $0["id"] == .string("ot-h1") } == true ? reply : nil
            }
            #expect(fences.ok)
            await friends.close()
            await janes.close()
            await ctl.disconnect()
        }
    }
}
