import FoundationEssentials
import Glibc
import Runtime

exit(await ServiceRunner.run(name: "motion") { _, reader in
    MotionService.definition(try MotionSettings(reader))
})
