import Foundation

exit(await HTTPService.run())
