import Foundation
import Runtime

exit(await ServiceRunner.run(name: "motion") { _, reader in
    MotionService.definition(try MotionSettings(reader))
})
