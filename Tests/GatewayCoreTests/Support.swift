import Foundation
import TestSupport

enum TestFixtures {
    static func url(_ name: String) -> URL { Fixtures.url(name) }
}
