// glibc's malloc extensions (malloc_trim), which Swift's Glibc module leaves out.
#include <malloc.h>
