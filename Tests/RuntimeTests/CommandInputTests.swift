import Bus
import Foundation
import Model
@testable import Runtime
import Testing

/// Command arguments as careless or hostile clients send them: every refusal
/// names the argument in JSON's terms, never a Swift type.
@Suite struct CommandInputTests {
    func refusal(_ args: String) -> String? {
        let message = MQTTMessage(topic: "tracker/d1/cmd/getRawFixes", string: #"{"id":1,"args":\#(args)}"#)
        switch IncomingCommand.parse(message, device: DeviceID("d1")!, name: "getRawFixes") {
        case .failure(let reply): return reply.reply.message
        case .success(let command):
            do {
                _ = try command.arguments(PageArgs.self).validated()
                return nil
            } catch { return error.message }
        }
    }

    @Test(arguments: [
        (#"{"limit":1.5}"#, "limit: expected a whole number"),
        (#"{"limit":9007199254740993}"#, "limit: expected a whole number"),
        (#"{"limit":"all"}"#, "limit: expected a number"),
        (#"{"offset":-1}"#, "offset must be ≥ 0"),
        (#"[1,2]"#, "args: expected an object"),
        (#"{"sessionID":{"a":1}}"#, "sessionID: expected a string"),
    ])
    func badArgumentsAreNamed(_ args: String, _ expected: String) {
        let text = refusal(args)
        #expect(text?.contains(expected) == true, "\(args) → \(text ?? "accepted")")
        #expect(!(text ?? "").contains("Dictionary") && !(text ?? "").contains("Int64") && !(text ?? "").contains("Swift"))
    }

    @Test func goodArgumentsPass() {
        #expect(refusal(#"{"limit":10,"offset":0}"#) == nil)
    }
}
